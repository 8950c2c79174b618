# Lesson 15 builds two programs from three files of yours: kv_table.c
# (the slot rules) is linked into both, with the lesson's kv.c (the CRC and
# the bucket of a key) and your lesson 05, rc.c ($(RC), rc.h): the
# connections are done; the exercise is the store.
PROGRAMS = kv_server kv_client
kv_server_SRCS = $(S)/$(L)/kv_server.c $(S)/$(L)/kv_table.c lessons/$(L)/kv.c $(RC)
kv_client_SRCS = $(S)/$(L)/kv_client.c $(S)/$(L)/kv_table.c lessons/$(L)/kv.c $(RC)
