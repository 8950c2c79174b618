// SPDX-License-Identifier: MIT
/*
 * kv.c - lesson 15's given helpers: the CRC-32 of the slots and the
 * bucket a key hashes to (kv.h). Both programs link it.
 */
#include "kv.h"

static uint32_t crc_table[256];

/* The table of the reflected polynomial 0xedb88320, built on first use. */
static void crc_init(void)
{
	uint32_t c;
	int n, k;

	for (n = 0; n < 256; n++) {
		c = (uint32_t)n;
		for (k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		crc_table[n] = c;
	}
}

uint32_t kv_crc32(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	if (!crc_table[1])
		crc_init();
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

uint32_t kv_bucket(const void *key, size_t len, uint32_t nbuckets)
{
	return kv_crc32(0, key, len) % nbuckets;
}
