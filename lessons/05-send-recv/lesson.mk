# Lesson 05 builds two programs from your rc.c (the connection, rc.h):
# pingpong (with your pingpong.c: the SEND/RECV) and the lesson's
# rc_check.c (what your rc.c makes of a later lesson's rc_params). Lessons
# 06, 07 and 09-12 link the same rc.c ($(RC), lessons/common/lesson.mk).
PROGRAMS = pingpong rc_check
pingpong_SRCS = $(S)/$(L)/pingpong.c $(S)/$(L)/rc.c
rc_check_SRCS = lessons/$(L)/rc_check.c $(S)/$(L)/rc.c
