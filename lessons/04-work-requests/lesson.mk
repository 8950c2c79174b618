# Lesson 04 builds one program: the lesson's driver linked with your
# worksheet.c (the exercises). See worksheet_check.c for its usage.
PROGRAMS = worksheet_check
worksheet_check_SRCS = $(S)/$(L)/worksheet.c lessons/$(L)/worksheet_check.c
