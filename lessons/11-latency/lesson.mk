# Lesson 11 links your lesson 05, rc.c ($(RC), rc.h): the connection is
# done; the exercise is the round trip and its timing.
PROGRAMS = latency
latency_SRCS = $(S)/$(L)/latency.c $(RC)
