# lesson.mk - how one lesson is built; the top-level Makefile calls it as
#   make -f lessons/common/lesson.mk L=05-send-recv S=skeletons OUT=build/skeletons/05-send-recv
# Default: every S/L/*.c is one program, linked with lessons/common/course.c.
# A lesson may override in lessons/L/lesson.mk:
#   PROGRAMS = prog ...        and for each:  prog_SRCS = files...
# ($(S), $(L) may be used there.) Headers in lessons/L/ and lessons/common/
# are on the include path.

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Ilessons/common -Ilessons/$(L)
LDLIBS  += -lrdmacm -libverbs -lm

-include lessons/$(L)/lesson.mk

PROGRAMS ?= $(basename $(notdir $(wildcard $(S)/$(L)/*.c)))
COMMON   := lessons/common/course.c lessons/common/course.h lessons/common/rc.h

all: $(addprefix $(OUT)/,$(PROGRAMS))

define program_rule
$(1)_SRCS ?= $(S)/$(L)/$(1).c
$(OUT)/$(1): $$($(1)_SRCS) $(COMMON) $(wildcard lessons/$(L)/*.h)
	@mkdir -p $(OUT)
	$$(CC) $$(CFLAGS) -o $$@ $$(filter %.c,$$^) $$(LDLIBS)
endef
$(foreach p,$(PROGRAMS),$(eval $(call program_rule,$(p))))

.PHONY: all
