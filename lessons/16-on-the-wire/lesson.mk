# Lesson 16 builds one program from the dump (roce_dump.c) and your answers
# to the README's questions (answers.c), with libpcap.
PROGRAMS = roce_dump
roce_dump_SRCS = $(S)/$(L)/roce_dump.c $(S)/$(L)/answers.c
LDLIBS += -lpcap
