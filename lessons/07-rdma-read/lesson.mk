# Lesson 07 links lesson 05's finished work, lessons/common/rc.c (rc.h):
# the connection is done; the exercise is the memory region and the work
# request.
PROGRAMS = rdma_read
rdma_read_SRCS = $(S)/$(L)/rdma_read.c lessons/common/rc.c
