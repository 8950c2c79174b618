# Lesson 12 links lesson 05's finished work, lessons/common/rc.c (rc.h):
# the connections are done; the exercise is the atomics.
PROGRAMS = atomics
atomics_SRCS = $(S)/$(L)/atomics.c lessons/common/rc.c
