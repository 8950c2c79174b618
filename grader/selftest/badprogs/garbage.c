/* Writes bytes that are not UTF-8 (and NULs), then a valid line. */
#include <stdio.h>
int main(void)
{
	static const unsigned char junk[] = { 0xff, 0xfe, 0x00, 0x80, 0xc3, '\n' };

	fwrite(junk, 1, sizeof(junk), stdout);
	printf("listening on port 4242\n");
	return 0;
}
