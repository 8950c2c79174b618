# Lesson 18 links your lesson 05, rc.c ($(RC), rc.h), for the faa and rc
# modes; the ud mode has its own small UD part in seq.c. answers.c holds
# your answers to the README's questions (seq --answers FILE).
PROGRAMS = seq
seq_SRCS = $(S)/$(L)/seq.c $(S)/$(L)/answers.c $(RC)
LDLIBS += -lpthread
