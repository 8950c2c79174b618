# rdma-course - graded RDMA programming lessons on SoftRoCE.
#
#   make grade [LESSON=NN] [SRC=DIR] [RESULTS=FILE] [JUNIT=FILE] [TEST=NAME] [V=1] [HOSTS=2]
#                        grade SRC (default: skeletons, your work) on an rxe device;
#                        TEST= only the tests whose name or title has NAME,
#                        V=1 every failure in full (default: each lesson's first),
#                        HOSTS=2 your programs on host A of two linked VMs, the
#                        grader's reference peers on host B
#   make watch LESSON=NN [SRC=DIR]  grade the lesson again on every save (Ctrl-C stops)
#   make status          where you stand: one line per lesson from the last grading
#   make hint LESSON=NN [TEST=NAME]  the next hint for the lesson's first failing test
#   make help            this list
#   make test [LESSON=NN]  the course's own tests (grader, scripts, self-check);
#                        LESSON=NN: that lesson's own self-check (its static
#                        checks, solution, skeleton, mutants, cheats, wire)
#   make lint            shellcheck + clang-format (make test runs it too)
#   make build LESSON=NN [SRC=DIR]   compile one lesson into build/SRC/NN-topic/
#   make doctor          can grading run here? one PASS/FAIL line per check
#   make vm-shell [HOSTS=2]  an interactive shell in the rxe micro-VM; HOSTS=2:
#                        on host A of two linked VMs ('b CMD' runs CMD on host B)
#   make vm-up           keep a warm micro-VM: later grading starts at once
#   make vm-down         stop it (it also stops after 15 idle minutes)
#   make plot LESSON=02  draw a lesson's measurements to a PNG (02, 11, 13, 18)
#   make bench-latency   lesson 11's reference RDMA p50 against ib_send_lat x 2
#                        (ratio, target <= 1.3) and the UDP p50, in one run
#   make bench-bw        lesson 13's reference bw against ib_write_bw: MB/s at
#                        64 KiB and Mmsg/s at 64 B (ratios, target >= 0.8)
#   make bench-kv [SRC=DIR]  lesson 15: one-sided GET against GET by request, torn
#                        READs under a writer, the graded ratios (README's table)
#   make bench-seq       lesson 18's reference seq, --mode faa, rc and ud at
#                        C = 1, 2, 4, 8: Mops/s, p50, p99, and its client against
#                        the reference client on one reference server (ratio,
#                        target >= 0.8), in one run
#   make bench-vm        micro-VM boot-to-ready time, with-rxe overhead, and a
#                        round trip in one VM against a linked pair
#   make bench-grade     wall time of grading all solutions and of make test
#   make bench-stability [N=5] [LESSON=..]  grade solutions and skeletons N times
#                        quiet, N with every core busy, N in half a CPU: the
#                        tests that lost points, the skeleton scores that moved
#   make student-repo OUT=DIR   the students' repository: no solutions (INSTRUCTORS.md)
#   make grade-class SUBMISSIONS=DIR OUT=DIR [JOBS=N] [LESSON=..] [DEADLINE=ISO-TIME]
#                        [PRELAB=NN=ISO-TIME] [FORCE=1] [ROSTER=FILE] [BATCH=N] [TIMEOUT=S]
#                        [SIMILARITY=1]
#                        grade a class into OUT/gradebook.csv and its report,
#                        OUT/report.html (INSTRUCTORS.md); PRELAB: lesson NN's
#                        pre-lab (09: the predictions) at the last commit before
#                        its own, earlier deadline; SIMILARITY=1: make similarity too
#   make class-report OUT=DIR   rebuild OUT/report.html (scores, the tests failed
#                        most, their symptoms) from a graded class, no regrading
#   make class-transcript OUT=DIR STUDENT=NAME [SUBMISSIONS=DIR]  one student's
#                        whole grading in one file, OUT/NAME/grading.txt
#   make similarity SUBMISSIONS=DIR [OUT=DIR] [LESSON=..] [DEADLINE=ISO-TIME]
#                        [THRESHOLD=50] [MIN_TOKENS=60]  similar submissions (sim_c,
#                        the skeleton's code left out): a list to read, no penalty
#   make bench-class     submissions per minute, JOBS=1 and JOBS=2, 8 submissions
#   make gradescope [LESSON=NN] [TEST=NAME|TEST='!NAME']  build/gradescope/autograder.zip
#                        (INSTRUCTORS.md); TEST: an assignment of those tests only
#                        (LESSON=09 TEST=predict: the pre-lab; TEST='!predict': the lab)
#   make deps            install the packages the course needs (root; Debian 12,
#                        Ubuntu 22.04/24.04)
#   make vm-kernel-update [CHECK=LESSONS|all|none]  pin Debian's current kernel
#                        (vm-setup/microvm/kernel.lock), grade the solutions on
#                        it (CHECK=01 by default), print old -> new
#   make vm-cache-export OUT=FILE   the pinned kernel package in a tarball, for
#                        machines without Internet access (an offline lab)
#   make vm-cache-import FILE=FILE  put that tarball's packages in this machine's
#                        cache, each checked against the pin's sha256
#   make bench-arm64     boot an arm64 guest under emulation (an arm64 root made
#                        with debootstrap) and grade lesson 01 in it (slow)
#   make clean

SRC     ?= skeletons
LESSON  ?=
RESULTS ?=
JUNIT   ?=
TEST    ?=
V       ?=
HOSTS   ?= 1
PYTHON  ?= /usr/bin/python3
WITH_RXE := vm-setup/with-rxe

lesson_dir = $(or $(firstword $(wildcard lessons/$(1)-* lessons/0$(1)-*)),\
	$(error no lesson '$(1)'; the lessons are: $(notdir $(wildcard lessons/[0-9][0-9]-*))))

# Where `make build` puts a lesson: build/SRC/NN-topic (build/abs/... for an
# absolute SRC).
build_out = build/$(patsubst /%,abs/%,$(SRC))/$(notdir $(call lesson_dir,$(1)))

.PHONY: help status hint watch grade test lint vm-up vm-down build doctor vm-shell plot bench-vm bench-grade bench-stability bench-latency bench-bw bench-kv bench-seq deps clean \
	student-repo grade-class class-report class-transcript similarity bench-class gradescope vm-kernel-update vm-cache-export vm-cache-import bench-arm64

comma := ,
grade:
	@$(foreach l,$(subst $(comma), ,$(LESSON)),$(if $(call lesson_dir,$(l)),))
	@$(PYTHON) -m grader grade --src='$(SRC)' $(if $(LESSON),--lesson='$(LESSON)') \
		$(if $(RESULTS),--results='$(abspath $(RESULTS))') \
		$(if $(JUNIT),--junit='$(abspath $(JUNIT))') \
		$(if $(TEST),--test='$(TEST)') $(if $(filter 1,$(V)),--verbose-failures) \
		--hosts='$(HOSTS)'

help:
	@sed -n '3,/^$$/s/^# \{0,1\}//p' Makefile

status:
	@$(PYTHON) -m grader status

hint:
	@$(if $(LESSON),,$(error usage: make hint LESSON=NN [TEST=NAME]))
	@$(PYTHON) -m grader hint --lesson='$(LESSON)' $(if $(TEST),--test='$(TEST)')

watch:
	@$(if $(LESSON),,$(error usage: make watch LESSON=NN [SRC=DIR]))
	@grader/run/watch.sh '$(LESSON)' '$(SRC)'

test:
	@$(if $(LESSON),grader/selftest/lesson-check.sh '$(LESSON)',grader/selftest/run-all.sh)

lint:
	@grader/selftest/lint.sh

build:
	@$(if $(LESSON),,$(error usage: make build LESSON=NN [SRC=DIR]))
	@$(MAKE) --no-print-directory -f lessons/common/lesson.mk \
		L=$(notdir $(call lesson_dir,$(LESSON))) S=$(SRC) \
		OUT=$(call build_out,$(LESSON))

doctor:
	@vm-setup/doctor.sh

vm-shell:
	@vm-setup/microvm/run.sh --shell $(if $(filter 2,$(HOSTS)),--pair)

vm-up:
	@vm-setup/microvm/run.sh --up

vm-down:
	@vm-setup/microvm/run.sh --down

plot:
	@$(if $(LESSON),,$(error usage: make plot LESSON=NN))
	@test -x $(call lesson_dir,$(LESSON))/plot.sh || \
		{ echo "lesson $(LESSON) has nothing to plot"; exit 2; }
	@$(MAKE) -s --no-print-directory build LESSON=$(LESSON) SRC=$(SRC)
	@$(if $(filter 11 13 18,$(LESSON)),RXE_VM_SMP=$${RXE_VM_SMP_BENCH:-2}) \
		$(WITH_RXE) $(call lesson_dir,$(LESSON))/plot.sh \
		$(call build_out,$(LESSON)) build/plots

bench-vm:
	@vm-setup/bench-vm.sh

bench-grade:
	@grader/selftest/bench-grade.sh

N ?= 5
bench-stability:
	@N='$(N)' LESSON='$(LESSON)' TEST='$(TEST)' grader/selftest/bench-stability.sh

# Two polling processes need a CPU each: the guest gets 2 vCPUs
# (RXE_VM_SMP_BENCH=N for another count; with 1 the scheduler sets the pace).
bench-latency:
	@$(MAKE) -s --no-print-directory build LESSON=11 SRC=solutions
	@RXE_VM_SMP=$${RXE_VM_SMP_BENCH:-2} $(WITH_RXE) lessons/11-latency/bench.sh \
		build/solutions/$(notdir $(call lesson_dir,11))

# Like bench-latency: the stream and rxe's own work each want a CPU.
bench-bw:
	@$(MAKE) -s --no-print-directory build LESSON=13 SRC=solutions
	@RXE_VM_SMP=$${RXE_VM_SMP_BENCH:-2} $(WITH_RXE) lessons/13-throughput/bench.sh \
		build/solutions/$(notdir $(call lesson_dir,13))

# Lesson 15: SRC given on the command line, else the reference solution
# where there is one (the students' repository: skeletons, their work).
KV_SRC = $(if $(filter command line,$(origin SRC)),$(SRC),$(if $(wildcard solutions/15-kv-store),solutions,skeletons))
bench-kv:
	@$(MAKE) -s --no-print-directory build LESSON=15 SRC=$(KV_SRC)
	@RXE_VM_SMP=$${RXE_VM_SMP_BENCH:-2} $(WITH_RXE) $(PYTHON) lessons/15-kv-store/bench.py \
		build/$(patsubst /%,abs/%,$(KV_SRC))/$(notdir $(call lesson_dir,15))

# Lesson 18: the reference seq's three modes and its client against the
# reference client on one reference server (lessons/18-sequencer/bench.sh).
bench-seq:
	@$(MAKE) -s --no-print-directory build LESSON=18 SRC=solutions
	@RXE_VM_SMP=$${RXE_VM_SMP_BENCH:-2} $(WITH_RXE) lessons/18-sequencer/bench.sh \
		build/solutions/$(notdir $(call lesson_dir,18))

student-repo:
	@$(if $(OUT),,$(error usage: make student-repo OUT=DIR))
	@$(PYTHON) -m grader student-repo '$(abspath $(OUT))'

SUBMISSIONS ?=
OUT     ?=
JOBS    ?= 1
DEADLINE ?=
PRELAB  ?=
FORCE   ?=
ROSTER  ?=
BATCH   ?=
TIMEOUT ?=
SIMILARITY ?=
grade-class:
	@$(if $(and $(SUBMISSIONS),$(OUT)),,$(error usage: make grade-class SUBMISSIONS=DIR OUT=DIR [JOBS=N] [LESSON=..] [DEADLINE=ISO-TIME] [PRELAB=NN=ISO-TIME] [FORCE=1] [ROSTER=FILE] [SIMILARITY=1]))
	@$(PYTHON) -m grader grade-class --submissions='$(abspath $(SUBMISSIONS))' \
		--out='$(abspath $(OUT))' --jobs='$(JOBS)' \
		$(if $(LESSON),--lesson='$(LESSON)') $(if $(DEADLINE),--deadline='$(DEADLINE)') \
		$(if $(PRELAB),--prelab='$(PRELAB)') \
		$(if $(filter 1,$(FORCE)),--force) $(if $(ROSTER),--roster='$(abspath $(ROSTER))') \
		$(if $(BATCH),--batch='$(BATCH)') $(if $(TIMEOUT),--timeout='$(TIMEOUT)') \
		$(if $(filter 1,$(SIMILARITY)),--similarity)

class-report:
	@$(if $(OUT),,$(error usage: make class-report OUT=DIR (a directory make grade-class wrote)))
	@$(PYTHON) -m grader.classroom.report '$(abspath $(OUT))'

STUDENT ?=
class-transcript:
	@$(if $(and $(OUT),$(STUDENT)),,$(error usage: make class-transcript OUT=DIR STUDENT=NAME [SUBMISSIONS=DIR]))
	@$(PYTHON) -m grader.classroom.transcript '$(abspath $(OUT))' '$(STUDENT)' \
		$(if $(SUBMISSIONS),--submissions='$(abspath $(SUBMISSIONS))')

THRESHOLD ?=
MIN_TOKENS ?=
similarity:
	@$(if $(SUBMISSIONS),,$(error usage: make similarity SUBMISSIONS=DIR [OUT=DIR] [LESSON=..] [DEADLINE=ISO-TIME] [THRESHOLD=PERCENT] [MIN_TOKENS=N]))
	@$(PYTHON) -m grader.classroom.similarity --submissions='$(abspath $(SUBMISSIONS))' \
		$(if $(OUT),--out='$(abspath $(OUT))') $(if $(LESSON),--lesson='$(LESSON)') \
		$(if $(DEADLINE),--deadline='$(DEADLINE)') $(if $(THRESHOLD),--threshold='$(THRESHOLD)') \
		$(if $(MIN_TOKENS),--min-tokens='$(MIN_TOKENS)')

bench-class:
	@grader/classroom/bench-class.sh

gradescope:
	@$(PYTHON) -m grader gradescope $(if $(LESSON),--lesson='$(LESSON)') \
		$(if $(TEST),--test='$(TEST)')

deps:
	@vm-setup/install-deps.sh

CHECK   ?=
FILE    ?=
vm-kernel-update:
	@vm-setup/microvm/kernel-update.sh $(if $(CHECK),--check '$(CHECK)')

vm-cache-export:
	@$(if $(OUT),,$(error usage: make vm-cache-export OUT=FILE))
	@vm-setup/microvm/vm-cache.sh export '$(abspath $(OUT))'

vm-cache-import:
	@$(if $(FILE),,$(error usage: make vm-cache-import FILE=FILE))
	@vm-setup/microvm/vm-cache.sh import '$(abspath $(FILE))'

bench-arm64:
	@vm-setup/bench-arm64.sh

clean:
	rm -rf build .grade
