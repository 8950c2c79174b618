# Lesson 09 builds one program from the lab (failures.c) and your
# predictions (predictions.c), on your lesson 05, rc.c ($(RC), rc.h).
PROGRAMS = failures
failures_SRCS = $(S)/$(L)/failures.c $(S)/$(L)/predictions.c $(RC)
