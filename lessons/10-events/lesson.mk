# Lesson 10 links lesson 05's finished work, lessons/common/rc.c (rc.h),
# with its completion channel: the exercise is how the program waits.
PROGRAMS = events
events_SRCS = $(S)/$(L)/events.c lessons/common/rc.c
LDLIBS += -lpthread
