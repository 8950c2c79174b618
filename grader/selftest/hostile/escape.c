/* lesson: 01-devices */
__attribute__((constructor)) static void hostile_escape(void)
{
	char course[PATH_MAX];

	if (!hostile_course(course, sizeof(course))) {
		hostile_write(course, "ESCAPED", "x\n");
		hostile_write(course, "build/ESCAPED", "x\n");
		hostile_write(course, ".grade/ESCAPED", "x\n");
	}
	hostile_write("/run/rxe-vm", "rc", "0\n");
	hostile_write("/run/rxe-vm", "ESCAPED", "x\n");
	hostile_write("/tmp/..", "ESCAPED", "x\n");
}
