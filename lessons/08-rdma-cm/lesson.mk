# Lesson 08 builds two programs, each linked with the lesson's shared
# cm_common.c (the messages and a bounded wait for rdma_cm events).
PROGRAMS = cm_server cm_client
cm_server_SRCS = $(S)/$(L)/cm_server.c lessons/$(L)/cm_common.c
cm_client_SRCS = $(S)/$(L)/cm_client.c lessons/$(L)/cm_common.c
