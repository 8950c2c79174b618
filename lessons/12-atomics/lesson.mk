# Lesson 12 links your lesson 05, rc.c ($(RC), rc.h): the connections
# are done; the exercise is the atomics.
PROGRAMS = atomics
atomics_SRCS = $(S)/$(L)/atomics.c $(RC)
