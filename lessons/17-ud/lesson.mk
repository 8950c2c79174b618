# Lesson 17 needs no RC connection (no $(RC)): one program, ud.c, with
# lessons/common/course.c for the TCP exchange and the options.
PROGRAMS = ud
