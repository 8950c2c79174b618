# Lesson 09 builds one program from the lab (failures.c) and your
# predictions (predictions.c), on lesson 05's finished work,
# lessons/common/rc.c.
PROGRAMS = failures
failures_SRCS = $(S)/$(L)/failures.c $(S)/$(L)/predictions.c lessons/common/rc.c
