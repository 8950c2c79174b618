# Lesson 10 links your lesson 05, rc.c ($(RC), rc.h), with its completion
# channel: the exercise is how the program waits.
PROGRAMS = events
events_SRCS = $(S)/$(L)/events.c $(RC)
LDLIBS += -lpthread
