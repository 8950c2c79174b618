# Lesson 14 links your lesson 05, rc.c ($(RC), rc.h): the server
# creates each client's QP itself (on its SRQ) and lets rc_connect_fd()
# connect it; the client is an rc_open()/rc_connect() client.
PROGRAMS = srq
srq_SRCS = $(S)/$(L)/srq.c $(RC)
