# Lesson 11 links lesson 05's finished work, lessons/common/rc.c (rc.h):
# the connection is done; the exercise is the round trip and its timing.
PROGRAMS = latency
latency_SRCS = $(S)/$(L)/latency.c lessons/common/rc.c
