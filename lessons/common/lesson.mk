# lesson.mk - how one lesson is built; the top-level Makefile calls it as
#   make -f lessons/common/lesson.mk L=05-send-recv S=skeletons OUT=build/skeletons/05-send-recv
# Default: every S/L/*.c is one program, linked with lessons/common/course.c.
# A lesson may override in lessons/L/lesson.mk:
#   PROGRAMS = prog ...        and for each:  prog_SRCS = files...
# ($(S), $(L) and $(RC) may be used there.) Headers in lessons/L/ and
# lessons/common/ are on the include path.
#
# $(RC) is the RC connection of lesson 05, rc.c (rc.h), which the lessons
# after it link: by default the one in the same tree, $(S)/05-send-recv/rc.c
# (your own lesson 05). The grader passes RC= to choose (grader/core/build.py).

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Ilessons/common -Ilessons/$(L)
LDLIBS  += -lrdmacm -libverbs -lm
RC      ?= $(S)/05-send-recv/rc.c

-include lessons/$(L)/lesson.mk

PROGRAMS ?= $(basename $(notdir $(wildcard $(S)/$(L)/*.c)))
COMMON   := lessons/common/course.c lessons/common/course.h lessons/common/rc.h

all: $(addprefix $(OUT)/,$(PROGRAMS))

# PREBUILT: FILE.c=FILE.o pairs, the course's own sources (course.c, a
# lesson's provided .c files, the reference rc.c) that the grader compiled
# once for every tree (grader/core/build.py); each program links FILE.o in
# place of FILE.c. Unset (make build), every program compiles them itself.
$(foreach p,$(PREBUILT),$(eval OBJ_$(firstword $(subst =, ,$(p))) := $(lastword $(subst =, ,$(p)))))

define program_rule
$(1)_SRCS ?= $(S)/$(L)/$(1).c
$(OUT)/$(1): $$($(1)_SRCS) $(COMMON) $(wildcard lessons/$(L)/*.h)
	@mkdir -p $(OUT)
	$$(CC) $$(CFLAGS) -o $$@ $$(foreach f,$$(filter %.c,$$^),$$(or $$(OBJ_$$(f)),$$(f))) $$(LDLIBS)
endef
$(foreach p,$(PROGRAMS),$(eval $(call program_rule,$(p))))

# One of those objects: make -f lessons/common/lesson.mk L=NN-topic
#   OBJ_SRC=lessons/common/course.c OBJ_OUT=FILE.o object
object:
	$(CC) $(CFLAGS) -c -o $(OBJ_OUT) $(OBJ_SRC)

.PHONY: all object
