/* Prints 64 MiB on stdout, then exits 3. */
#include <stdio.h>
#include <string.h>
int main(void)
{
	static char line[1024];
	int i;

	memset(line, 'x', sizeof(line) - 1);
	line[sizeof(line) - 2] = '\n';
	for (i = 0; i < 64 * 1024; i++)
		fputs(line, stdout);
	return 3;
}
