# Lesson 06 links your lesson 05, rc.c ($(RC), rc.h): the connection is
# done; the exercise is the memory region and the work request.
PROGRAMS = rdma_write
rdma_write_SRCS = $(S)/$(L)/rdma_write.c $(RC)
