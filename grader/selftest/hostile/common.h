/* Shared by the attacks: the course tree, found from the program's path
 * (COURSE/build/grade/TAG/LESSON/PROG). */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int hostile_course(char *buf, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *p;
	int up;

	if (n < 0)
		return -1;
	exe[n] = 0;
	for (up = 0; up < 5; up++) {
		p = strrchr(exe, '/');
		if (!p)
			return -1;
		*p = 0;
	}
	snprintf(buf, len, "%s", exe);
	return 0;
}

static void hostile_write(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		if (write(fd, text, strlen(text)) < 0)
			perror(path);
		close(fd);
	}
}
