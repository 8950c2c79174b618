# Lesson 13 links your lesson 05, rc.c ($(RC), rc.h): the connection is
# done; the exercise is keeping the send queue full.
PROGRAMS = bw
bw_SRCS = $(S)/$(L)/bw.c $(RC)
