/* SPDX-License-Identifier: MIT */
/*
 * kv.h - lesson 15's key-value store: the table in the server's memory and
 * the messages client and server SEND each other. lessons/15-kv-store/
 * README.md ("The table" and "The messages") is the specification; the
 * grader's reference server and clients (grader/evidence/trusted/kv.py)
 * implement the same bytes.
 *
 * Everything here is little-endian (the host order of x86-64 and arm64):
 * a plain uint32_t/uint64_t in memory, and on the wire.
 *
 * Provided by the lesson (kv.c: the CRC-32 and the bucket of a key); the
 * exercises are kv_table.c, kv_server.c and kv_client.c.
 */
#ifndef KV_H
#define KV_H

#include <stddef.h>
#include <stdint.h>

#define KV_KEY_MAX     16 /* bytes of a key: 1 to 16 */
#define KV_VAL_MAX     96 /* bytes of a value: 1 to 96 */
#define KV_SLOTS       4  /* slots per bucket */
#define KV_SLOT_SIZE   128
#define KV_BUCKET_SIZE (KV_SLOTS * KV_SLOT_SIZE) /* 512: what a GET READs */

/*
 * One slot of the table (128 bytes). The table is an array of buckets of
 * KV_SLOTS slots; a key lives in one slot of bucket kv_bucket(key).
 *
 *   crc      CRC-32 (kv_crc32) of the slot's bytes 4 up to 32 + val_len:
 *            key_len, val_len, reserved, version, key[] (all 16 bytes)
 *            and the value's val_len bytes
 *   key_len  0: the slot is free; 1..16: the key's length
 *   val_len  the value's length, 0 in a free slot
 *   version  0: never written (free, nothing else counts); odd: the
 *            server is writing the slot; even: a complete write. +2 each
 *            time the slot is written (PUT or DELETE)
 *   key      key_len bytes, the rest zeros
 *   value    val_len bytes; what lies after them is left over
 */
struct kv_slot {
	uint32_t crc;
	uint8_t key_len;
	uint8_t val_len;
	uint16_t reserved;
	uint64_t version;
	uint8_t key[KV_KEY_MAX];
	uint8_t value[KV_VAL_MAX];
};

#define KV_CRC_OFFSET	4  /* the first byte the CRC covers */
#define KV_VALUE_OFFSET 32 /* offsetof(struct kv_slot, value) */

_Static_assert(sizeof(struct kv_slot) == KV_SLOT_SIZE, "slot layout");
_Static_assert(offsetof(struct kv_slot, value) == KV_VALUE_OFFSET,
	       "slot layout");

/* What a request asks (kv_msg.op); a reply carries the same op. */
enum kv_op {
	KV_GET = 'G', /* look the key up (a GET by request: --rpc-get) */
	KV_PUT = 'P', /* insert or replace key = value */
	KV_DEL = 'D', /* remove the key */
	KV_BYE = 'B', /* the client is done: the last request */
};

/* What became of it (kv_msg.status, in replies). */
enum kv_status {
	KV_OK = 0,     /* done; slot and version say where */
	KV_ABSENT = 1, /* GET, DEL: no such key */
	KV_FULL = 2,   /* PUT: the key's bucket has no free slot */
	KV_BAD = 3,    /* a request the server cannot read */
};

/*
 * A request or a reply: one SEND of KV_MSG_SIZE bytes.
 *
 *   request: op, key_len, val_len, seq, client, key, value (PUT)
 *   reply:   op, seq and client copied from the request; status; for
 *            KV_OK slot (bucket x KV_SLOTS + index) and the slot's
 *            version after the write (GET: the value's); a GET's
 *            val_len and value
 */
struct kv_msg {
	uint8_t op;
	uint8_t status;
	uint8_t key_len;
	uint8_t val_len;
	uint32_t seq;	 /* the client's request number: 1, 2, 3, ... */
	uint32_t client; /* the client's id: the number of its QP */
	uint32_t slot;
	uint64_t version;
	uint8_t key[KV_KEY_MAX];
	uint8_t value[KV_VAL_MAX];
};

#define KV_MSG_SIZE 136

_Static_assert(sizeof(struct kv_msg) == KV_MSG_SIZE, "message layout");

/*
 * CRC-32 as zlib's crc32() and Python's zlib.crc32() compute it
 * (IEEE 802.3, reflected, initial and final value 0xffffffff): start
 * with @crc = 0; feed more with the result.
 */
uint32_t kv_crc32(uint32_t crc, const void *buf, size_t len);

/* The bucket of a key: kv_crc32(0, key, len) % nbuckets. */
uint32_t kv_bucket(const void *key, size_t len, uint32_t nbuckets);

/* ---- kv_table.c: the slot rules, for both programs (TODOs 1, 2) ------ */

/* The CRC a slot must carry, computed from its other bytes. */
uint32_t kv_slot_crc(const struct kv_slot *s);

/*
 * Does @s (a copy, e.g. what a READ brought) hold a complete write?
 * 1 when it does, 0 when it was caught in the middle of one (torn).
 */
int kv_slot_consistent(const struct kv_slot *s);

/*
 * The slot of @key in the bucket at @bucket (KV_SLOTS slots, each
 * consistent): its index, or -1 when no slot holds the key.
 */
int kv_bucket_find(const struct kv_slot *bucket, const uint8_t *key,
		   size_t key_len);

#endif /* KV_H */
