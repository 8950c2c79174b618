# Lesson 13 links lesson 05's RC connection, rc.c (rc.h): the connection
# is done; the exercise is keeping the send queue full.
PROGRAMS = bw
bw_SRCS = $(S)/$(L)/bw.c $(or $(RC),lessons/common/rc.c)
