"""grader/session/server.py's staleness check: the warm grader compares,
per request, only the grader files it imported (their size and mtime)
instead of walking grader/ (2.5 s per request over the VM's 9p share).
A changed imported file still makes it stale; a file it never imported is
read from the disk by the session anyway."""

import os

from grader.session import server


def test_the_imported_grader_files_are_listed():
    files = server.imported()
    assert "session/server.py" in files and "core/harness.py" in files
    assert all(not f.startswith("/") for f in files)


def test_a_touched_imported_file_changes_the_fingerprint(tmp_path,
                                                        monkeypatch):
    # (A copy: the course's own files may be in use by a warm grader.)
    (tmp_path / "session").mkdir()
    path = tmp_path / "session" / "pairs.py"
    path.write_text("x = 1\n")
    monkeypatch.setattr(server, "GRADER", tmp_path)
    files = ["session/pairs.py"]
    before = server.fingerprint(files)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    after = server.fingerprint(files)
    assert after != before
    assert "grader/session/pairs.py changed" in server.changed(before, after)


def test_a_missing_file_changes_the_fingerprint():
    files = [*server.imported(), "session/no-such-file.py"]
    fp = server.fingerprint(files)
    assert fp[-1] == ("session/no-such-file.py", None, None)
