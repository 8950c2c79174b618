"""What the grader knows without taking a program's word: where programs run
(sandbox.py, sandbox-exec.c), the device and its counters (rxe.py), what a
program called (interpose/), the course's reference peers and the kernel's
view of their partner (trusted/), the other host of a pair (remote.py).
Built on grader.core; imports nothing of the floors above."""

from pathlib import Path

from grader.core.build import grader_program


def build_programs(course):
    """Everything of the grader's own that is compiled: make grade and make
    test build them on the host (gcc is much slower in the VM)."""
    from grader.evidence.interpose import build_interposer
    grader_program(course, "evidence/sandbox-exec.c")
    grader_program(course, "session/client.c")
    build_interposer(course)
    # The grader's Python, compiled here too: a one-shot VM sees grader/
    # read-only (vm-setup/microvm/run.sh), where Python could not save the
    # bytecode of a module it compiled. Only what changed is compiled; a
    # grader/ this user may not write is left as it is.
    import compileall
    compileall.compile_dir(Path(course) / "grader", quiet=2)
