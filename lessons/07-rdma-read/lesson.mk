# Lesson 07 links your lesson 05, rc.c ($(RC), rc.h): the connection is
# done; the exercise is the memory region and the work request.
PROGRAMS = rdma_read
rdma_read_SRCS = $(S)/$(L)/rdma_read.c $(RC)
