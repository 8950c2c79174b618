# Lesson 14 links lesson 05's RC connection, rc.c (rc.h): the server
# creates each client's QP itself (on its SRQ) and lets rc_connect_fd()
# connect it; the client is an rc_open()/rc_connect() client.
PROGRAMS = srq
srq_SRCS = $(S)/$(L)/srq.c $(or $(RC),lessons/common/rc.c)
