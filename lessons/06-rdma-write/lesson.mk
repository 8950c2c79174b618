# Lesson 06 links lesson 05's finished work, lessons/common/rc.c (rc.h):
# the connection is done; the exercise is the memory region and the work
# request.
PROGRAMS = rdma_write
rdma_write_SRCS = $(S)/$(L)/rdma_write.c lessons/common/rc.c
