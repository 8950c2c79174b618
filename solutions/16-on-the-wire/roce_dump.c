// SPDX-License-Identifier: MIT
/*
 * roce_dump.c - lesson 16: read a capture of a RoCE v2 link, one line per
 * RoCE packet.
 *
 *	roce_dump FILE.pcap      every RoCE v2 packet of FILE, then a summary
 *	roce_dump --answers FILE.pcap
 *				 the README's questions, answered by answers.c
 *				 from FILE's RoCE v2 packets
 *
 * A line (lessons/16-on-the-wire/README.md, "Output", has every field):
 *
 *	FRAME SRC > DST OPCODE qp 0xQQQQQQ psn 0xPPPPPP [HEADERS] payload N
 *
 * FRAME is the frame's number in the file (1, 2, ...: tshark's too). Frames
 * that are not RoCE v2 (not IPv4/UDP to port 4791) print nothing but count
 * in the summary. A RoCE packet shorter than its headers prints
 * "FRAME SRC > DST malformed: WHAT needs N bytes, got M".
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answers.h"
#include "course.h"

static const char usage[] = "FILE.pcap | --answers FILE.pcap";

#define ROCE_UDP_PORT 4791
#define ETH_HLEN      14
#define ETH_P_IPV4    0x0800
#define IPPROTO_UDP_  17
#define BTH_LEN	      12
#define ICRC_LEN      4

/* The extension headers an opcode carries, in the order they follow the
 * BTH (IBTA vol. 1, 9.2; rxe's rxe_opcode.c has the same table). */
enum {
	HDR_DETH = 1 << 0,	     /* 8 bytes: Q_Key, source QP (UD) */
	HDR_RETH = 1 << 1,	     /* 16: virtual address, rkey, DMA length */
	HDR_ATOMIC_ETH = 1 << 2,     /* 28: VA, rkey, swap (or add), compare */
	HDR_AETH = 1 << 3,	     /* 4: syndrome, MSN */
	HDR_ATOMIC_ACK_ETH = 1 << 4, /* 8: the remote data before the atomic */
	HDR_IMMDT = 1 << 5,	     /* 4: immediate data */
	HDR_IETH = 1 << 6,	     /* 4: the rkey to invalidate */
};

struct hdr_size {
	unsigned int hdr;
	size_t len;
};

/* In wire order. */
static const struct hdr_size hdr_sizes[] = {
	{ HDR_DETH, 8 },	   /* DETH */
	{ HDR_RETH, 16 },	   /* RETH */
	{ HDR_ATOMIC_ETH, 28 },	   /* AtomicETH */
	{ HDR_AETH, 4 },	   /* AETH */
	{ HDR_ATOMIC_ACK_ETH, 8 }, /* AtomicAckETH */
	{ HDR_IMMDT, 4 },	   /* ImmDt */
	{ HDR_IETH, 4 },	   /* IETH */
};

struct opcode_info {
	const char *name;
	unsigned int hdrs;
};

/* The RC and UD opcodes; UC's (0x20 | low bits) are RC's SENDs and WRITEs. */
static const struct opcode_info rc_opcodes[32] = {
	[0x00] = { "SEND_FIRST", 0 },
	[0x01] = { "SEND_MIDDLE", 0 },
	[0x02] = { "SEND_LAST", 0 },
	[0x03] = { "SEND_LAST_WITH_IMMEDIATE", HDR_IMMDT },
	[0x04] = { "SEND_ONLY", 0 },
	[0x05] = { "SEND_ONLY_WITH_IMMEDIATE", HDR_IMMDT },
	/* TODO 6: which extension headers does each of these opcodes carry?
	 * (README, "Which headers follow the BTH"; man ibv_post_send says
	 * what an RDMA WRITE, READ and atomic need from the requester.) */
	[0x06] = { "RDMA_WRITE_FIRST", HDR_RETH },
	[0x07] = { "RDMA_WRITE_MIDDLE", 0 },
	[0x08] = { "RDMA_WRITE_LAST", 0 },
	[0x09] = { "RDMA_WRITE_LAST_WITH_IMMEDIATE", HDR_IMMDT },
	[0x0a] = { "RDMA_WRITE_ONLY", HDR_RETH },
	[0x0b] = { "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HDR_RETH | HDR_IMMDT },
	[0x0c] = { "RDMA_READ_REQUEST", HDR_RETH },
	[0x0d] = { "RDMA_READ_RESPONSE_FIRST", HDR_AETH },
	[0x0e] = { "RDMA_READ_RESPONSE_MIDDLE", 0 },
	[0x0f] = { "RDMA_READ_RESPONSE_LAST", HDR_AETH },
	[0x10] = { "RDMA_READ_RESPONSE_ONLY", HDR_AETH },
	[0x11] = { "ACKNOWLEDGE", HDR_AETH },
	[0x12] = { "ATOMIC_ACKNOWLEDGE", HDR_AETH | HDR_ATOMIC_ACK_ETH },
	[0x13] = { "COMPARE_SWAP", HDR_ATOMIC_ETH },
	[0x14] = { "FETCH_ADD", HDR_ATOMIC_ETH },
	/* END TODO 6 */
	[0x16] = { "SEND_LAST_WITH_INVALIDATE", HDR_IETH },
	[0x17] = { "SEND_ONLY_WITH_INVALIDATE", HDR_IETH },
};

static const char *const nak_codes[] = {
	[0] = "PSN_SEQUENCE_ERROR",	  /* syndrome 0x60 */
	[1] = "INVALID_REQUEST",	  /* 0x61 */
	[2] = "REMOTE_ACCESS_ERROR",	  /* 0x62 */
	[3] = "REMOTE_OPERATIONAL_ERROR", /* 0x63 */
	[4] = "INVALID_RD_REQUEST",	  /* 0x64 */
};

/* One RoCE v2 packet, decoded. */
struct roce_pkt {
	char name[40]; /* "RC_SEND_FIRST", or "OPCODE_0x81" */
	uint8_t opcode;
	unsigned int hdrs; /* HDR_* present; 0 for an unknown opcode */
	int known;	   /* the opcode is in the tables */
	int se, ackreq;
	unsigned int padcnt;
	uint32_t destqp, psn;
	uint64_t va; /* RETH, AtomicETH */
	uint32_t rkey, dmalen;
	uint8_t syndrome; /* AETH */
	uint32_t msn;
	uint64_t swap_add, compare; /* AtomicETH */
	uint64_t orig;		    /* AtomicAckETH */
	uint32_t imm, ieth;   /* ImmDt, IETH (as 32-bit big-endian values) */
	uint32_t qkey, srcqp; /* DETH */
	size_t payload;	      /* bytes after the headers, less pad and ICRC */
};

/* Where one frame's RoCE v2 packet is. */
struct frame_view {
	char src[16], dst[16]; /* dotted IPv4 */
	const uint8_t *roce;   /* the UDP payload: BTH onwards */
	size_t len;	       /* its captured bytes */
};

struct dump_ctx {
	const char *file;
	pcap_t *pcap;
	unsigned long frames, roce, malformed, other;
	int answers;		/* --answers: keep the packets, print nothing */
	struct roce_view *pkts; /* --answers: the packets kept */
	size_t n, cap;
};

/* The questions of the README, answered by answer() (answers.c). */
const char *const questions[] = {
	"write-packets", "write-acks",	   "rkey-opcode",    "imm-opcode",
	"read-responses", "read-acks",	   "rnr-syndrome",   "rnr-resent-psn",
	"nak-code",	  "resent-psn",	   NULL,
};

static uint16_t get16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return be16toh(v);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

static void ipv4_str(const uint8_t *a, char *buf, size_t len)
{
	snprintf(buf, len, "%u.%u.%u.%u", a[0], a[1], a[2], a[3]);
}

/*
 * Find the RoCE v2 packet in an Ethernet frame of @caplen captured bytes:
 * an IPv4 packet (EtherType 0x0800; the header is IHL x 4 bytes; the first
 * fragment only) holding a UDP datagram to port 4791. Fill @v (addresses,
 * the UDP payload and its length, bounded by both the captured bytes and
 * the IP and UDP lengths). Returns 1 for a RoCE v2 packet, 0 for any other
 * frame, -1 when a TODO is not done.
 */
static int find_roce(const uint8_t *frame, size_t caplen, struct frame_view *v)
{
	const uint8_t *ip, *udp;
	size_t ihl, end;

	/* TODO 3: the IPv4 header: EtherType at bytes 12-13; version 4 and
	 * IHL in the first byte; the total length (bytes 2-3) bounds the
	 * packet; fragment offset (low 13 bits of bytes 6-7) must be 0;
	 * protocol (byte 9) must be UDP (17); source and destination at
	 * bytes 12 and 16. Set ip, ihl and end (where the IP packet ends in
	 * the captured frame). */
	if (caplen < ETH_HLEN + 20 || get16(frame + 12) != ETH_P_IPV4)
		return 0;
	ip = frame + ETH_HLEN;
	ihl = (size_t)(ip[0] & 0x0f) * 4;
	if ((ip[0] >> 4) != 4 || ihl < 20 || caplen < ETH_HLEN + ihl)
		return 0;
	if ((get16(ip + 6) & 0x1fff) || ip[9] != IPPROTO_UDP_)
		return 0;
	end = ETH_HLEN + get16(ip + 2);
	if (end > caplen)
		end = caplen;
	ipv4_str(ip + 12, v->src, sizeof(v->src));
	ipv4_str(ip + 16, v->dst, sizeof(v->dst));
	/* END TODO 3 */

	/* TODO 4: the UDP header (8 bytes after the IP header): destination
	 * port (bytes 2-3) 4791 is RoCE v2; its length (bytes 4-5, header
	 * included) bounds the payload too. Set v->roce and v->len. */
	if (end < ETH_HLEN + ihl + 8)
		return 0;
	udp = ip + ihl;
	if (get16(udp + 2) != ROCE_UDP_PORT)
		return 0;
	v->roce = udp + 8;
	v->len = end - (ETH_HLEN + ihl + 8);
	if (get16(udp + 4) >= 8 && get16(udp + 4) - 8u < v->len)
		v->len = get16(udp + 4) - 8u;
	return 1;
	/* END TODO 4 */
}

/* The opcode's name and headers; known = 0 for RD, CNP and reserved. */
static void opcode_of(struct roce_pkt *p)
{
	const struct opcode_info *info = NULL;
	unsigned int low = p->opcode & 0x1f;

	p->known = 0;
	p->hdrs = 0;
	if (p->opcode < 0x20 && rc_opcodes[low].name) {
		info = &rc_opcodes[low];
		snprintf(p->name, sizeof(p->name), "RC_%s", info->name);
	} else if (p->opcode >= 0x20 && p->opcode < 0x40 && low <= 0x0b) {
		info = &rc_opcodes[low];
		snprintf(p->name, sizeof(p->name), "UC_%s", info->name);
	} else if (p->opcode == 0x64 || p->opcode == 0x65) {
		snprintf(p->name, sizeof(p->name), "UD_%s",
			 rc_opcodes[low].name);
		p->known = 1;
		p->hdrs = HDR_DETH | rc_opcodes[low].hdrs;
		return;
	} else {
		snprintf(p->name, sizeof(p->name), "OPCODE_0x%02x", p->opcode);
		return;
	}
	p->known = 1;
	p->hdrs = info->hdrs;
}

/*
 * Decode the RoCE v2 packet @b (@len bytes, BTH onwards) into @p. Returns
 * 0, or -1 with @why set when the packet is shorter than its headers
 * ("BTH needs 12 bytes, got 7", "RC_RDMA_WRITE_FIRST needs 32 bytes, got
 * 20": the BTH, the opcode's headers and the ICRC), -2 when a TODO is not
 * done.
 */
static int decode(const uint8_t *b, size_t len, struct roce_pkt *p, char *why,
		  size_t why_len)
{
	size_t need = BTH_LEN + ICRC_LEN, off = BTH_LEN, i, tail;

	memset(p, 0, sizeof(*p));
	if (len < BTH_LEN) {
		snprintf(why, why_len, "BTH needs %d bytes, got %zu", BTH_LEN,
			 len);
		return -1;
	}
	/* TODO 5: the BTH, all big-endian: byte 0 the opcode; byte 1 the
	 * solicited-event bit (0x80) and the pad count (bits 4-5); bytes 2-3
	 * the P_Key; bytes 5-7 the destination QP (24 bits); byte 8's top bit
	 * the ack-request bit, bytes 9-11 the PSN (24 bits). */
	p->opcode = b[0];
	p->se = !!(b[1] & 0x80);
	p->padcnt = (b[1] >> 4) & 3;
	p->destqp = get32(b + 4) & 0xffffff;
	p->ackreq = !!(b[8] & 0x80);
	p->psn = get32(b + 8) & 0xffffff;
	/* END TODO 5 */
	opcode_of(p);
	if (!p->known)
		return 0;
	for (i = 0; i < sizeof(hdr_sizes) / sizeof(hdr_sizes[0]); i++)
		if (p->hdrs & hdr_sizes[i].hdr)
			need += hdr_sizes[i].len;
	if (len < need) {
		snprintf(why, why_len, "%s needs %zu bytes, got %zu", p->name,
			 need, len);
		return -1;
	}

	/* TODO 7: each header p->hdrs has, in hdr_sizes[]' order, from
	 * b + off: DETH (Q_Key, source QP: low 24 bits), RETH (VA 64, rkey
	 * 32, DMA length 32), AtomicETH (VA, rkey, swap or add 64, compare
	 * 64), AETH (syndrome: top byte; MSN: low 24 bits), AtomicAckETH
	 * (64), ImmDt, IETH (32 each). Then the payload: what is left after
	 * the headers, less the pad bytes and the 4-byte ICRC (0 if none). */
	for (i = 0; i < sizeof(hdr_sizes) / sizeof(hdr_sizes[0]); i++) {
		const uint8_t *h = b + off;

		if (!(p->hdrs & hdr_sizes[i].hdr))
			continue;
		switch (hdr_sizes[i].hdr) {
		case HDR_DETH:
			p->qkey = get32(h);
			p->srcqp = get32(h + 4) & 0xffffff;
			break;
		case HDR_RETH:
			p->va = get64(h);
			p->rkey = get32(h + 8);
			p->dmalen = get32(h + 12);
			break;
		case HDR_ATOMIC_ETH:
			p->va = get64(h);
			p->rkey = get32(h + 8);
			p->swap_add = get64(h + 12);
			p->compare = get64(h + 20);
			break;
		case HDR_AETH:
			p->syndrome = h[0];
			p->msn = get32(h) & 0xffffff;
			break;
		case HDR_ATOMIC_ACK_ETH:
			p->orig = get64(h);
			break;
		case HDR_IMMDT:
			p->imm = get32(h);
			break;
		case HDR_IETH:
			p->ieth = get32(h);
			break;
		}
		off += hdr_sizes[i].len;
	}
	tail = p->padcnt + ICRC_LEN;
	p->payload = len > off + tail ? len - off - tail : 0;
	/* END TODO 7 */
	return 0;
}

/*
 * " aeth KIND ... msn N": the AETH syndrome's top 3 bits say what it is -
 * 000 an ACK (low 5 bits: credits), 001 an RNR NAK (low 5 bits: the RNR
 * timer code), 011 a NAK (low 5 bits: its code, nak_codes[]); anything
 * else is reserved. Returns 0, -1 when a TODO is not done.
 */
static int print_aeth(const struct roce_pkt *p)
{
	unsigned int low = p->syndrome & 0x1f;

	/* TODO 8: print " aeth ACK credits C msn M", " aeth RNR_NAK timer T
	 * msn M", " aeth NAK CODE msn M" (CODE from nak_codes[], or NAK_0xNN
	 * past its end) or " aeth RESERVED 0xSS msn M" for the others. */
	switch (p->syndrome >> 5) {
	case 0:
		printf(" aeth ACK credits %u", low);
		break;
	case 1:
		printf(" aeth RNR_NAK timer %u", low);
		break;
	case 3:
		if (low < sizeof(nak_codes) / sizeof(nak_codes[0]))
			printf(" aeth NAK %s", nak_codes[low]);
		else
			printf(" aeth NAK NAK_0x%02x", low);
		break;
	default:
		printf(" aeth RESERVED 0x%02x", p->syndrome);
	}
	printf(" msn %u", p->msn);
	return 0;
	/* END TODO 8 */
}

static int print_packet(unsigned long frame, const struct frame_view *v,
			const struct roce_pkt *p)
{
	printf("%lu %s > %s %s qp 0x%06x psn 0x%06x", frame, v->src, v->dst,
	       p->name, p->destqp, p->psn);
	if (!p->known) {
		printf("\n");
		return 0;
	}
	if (p->ackreq)
		printf(" ack-req");
	if (p->se)
		printf(" se");
	if (p->hdrs & HDR_DETH)
		printf(" deth qkey 0x%08x srcqp 0x%06x", p->qkey, p->srcqp);
	if (p->hdrs & HDR_RETH)
		printf(" reth va 0x%016llx rkey 0x%08x len %u",
		       (unsigned long long)p->va, p->rkey, p->dmalen);
	if (p->hdrs & HDR_ATOMIC_ETH) {
		printf(" atomic va 0x%016llx rkey 0x%08x",
		       (unsigned long long)p->va, p->rkey);
		if ((p->opcode & 0x1f) == 0x14)
			printf(" add %llu", (unsigned long long)p->swap_add);
		else
			printf(" compare %llu swap %llu",
			       (unsigned long long)p->compare,
			       (unsigned long long)p->swap_add);
	}
	if ((p->hdrs & HDR_AETH) && print_aeth(p))
		return -1;
	if (p->hdrs & HDR_ATOMIC_ACK_ETH)
		printf(" orig %llu", (unsigned long long)p->orig);
	if (p->hdrs & HDR_IMMDT)
		printf(" imm 0x%08x", p->imm);
	if (p->hdrs & HDR_IETH)
		printf(" ieth 0x%08x", p->ieth);
	printf(" payload %zu\n", p->payload);
	return 0;
}

/* --answers: keep packet @p of frame @frame for answer(). 0 or -1. */
static int keep_packet(struct dump_ctx *ctx, unsigned long frame,
		       const struct frame_view *v, const struct roce_pkt *p)
{
	struct roce_view *k;

	if (ctx->n == ctx->cap) {
		size_t cap = ctx->cap ? 2 * ctx->cap : 256;

		k = realloc(ctx->pkts, cap * sizeof(*k));
		if (!k) {
			fprintf(stderr, "out of memory\n");
			return -1;
		}
		ctx->pkts = k;
		ctx->cap = cap;
	}
	k = &ctx->pkts[ctx->n++];
	*k = (struct roce_view){
		.frame = frame,
		.opcode = p->opcode,
		.destqp = p->destqp,
		.psn = p->psn,
		.has_reth = !!(p->hdrs & HDR_RETH),
		.has_immdt = !!(p->hdrs & HDR_IMMDT),
		.has_aeth = !!(p->hdrs & HDR_AETH),
		.syndrome = p->syndrome,
	};
	snprintf(k->src, sizeof(k->src), "%s", v->src);
	snprintf(k->dst, sizeof(k->dst), "%s", v->dst);
	snprintf(k->name, sizeof(k->name), "%s", p->name);
	if (k->has_aeth && (p->syndrome >> 5) == 3 &&
	    (p->syndrome & 0x1f) < sizeof(nak_codes) / sizeof(nak_codes[0]))
		k->nak_code = nak_codes[p->syndrome & 0x1f];
	return 0;
}

/* One frame: print it if it is RoCE v2 (with --answers, keep it). 0, or -1
 * when a TODO is not done. */
static int dump_frame(struct dump_ctx *ctx, const uint8_t *data, size_t caplen)
{
	struct frame_view v = { 0 };
	struct roce_pkt p;
	char why[128];
	int ret;

	ctx->frames++;
	ret = find_roce(data, caplen, &v);
	if (ret < 0)
		return -1;
	if (ret == 0) {
		ctx->other++;
		return 0;
	}
	ctx->roce++;
	ret = decode(v.roce, v.len, &p, why, sizeof(why));
	if (ret == -2)
		return -1;
	if (ret == -1) {
		ctx->malformed++;
		if (!ctx->answers)
			printf("%lu %s > %s malformed: %s\n", ctx->frames,
			       v.src, v.dst, why);
		return 0;
	}
	if (ctx->answers)
		return keep_packet(ctx, ctx->frames, &v, &p);
	return print_packet(ctx->frames, &v, &p);
}

/*
 * Open @ctx->file and check it holds Ethernet frames. 0, or -1 with one
 * line printed: "pcap_open_offline failed: REASON" (libpcap's errbuf), or
 * "FILE: link type N (NAME) is not Ethernet".
 */
static int open_ctx(struct dump_ctx *ctx)
{
	char errbuf[PCAP_ERRBUF_SIZE];
	int ret;

	/* TODO 1: pcap_open_offline() the file into ctx->pcap (on failure
	 * print its errbuf); pcap_datalink() must be DLT_EN10MB (name it
	 * with pcap_datalink_val_to_name(), then pcap_close()). Set ret to
	 * 0 or -1. */
	ctx->pcap = pcap_open_offline(ctx->file, errbuf);
	if (!ctx->pcap) {
		fprintf(stderr, "pcap_open_offline failed: %s\n", errbuf);
		return -1;
	}
	ret = pcap_datalink(ctx->pcap);
	if (ret != DLT_EN10MB) {
		const char *name = pcap_datalink_val_to_name(ret);

		fprintf(stderr, "%s: link type %d (%s) is not Ethernet\n",
			ctx->file, ret, name ? name : "unknown");
		pcap_close(ctx->pcap);
		ctx->pcap = NULL;
		return -1;
	}
	ret = 0;
	/* END TODO 1 */
	return ret;
}

/*
 * Every frame of the file, in order. 0 at the end of the file, -1 with one
 * line printed when libpcap cannot read on ("pcap_next_ex failed: REASON":
 * pcap_geterr(), e.g. a file cut short in the middle of a record).
 */
static int dump_all(struct dump_ctx *ctx)
{
	struct pcap_pkthdr *hdr;
	const u_char *data;
	int ret;

	/* TODO 2: loop on pcap_next_ex(): 1 is a frame (hdr->caplen bytes at
	 * data: hand it to dump_frame(), stop if that fails), PCAP_ERROR_BREAK
	 * (-2) the end of the file, PCAP_ERROR (-1) an error. */
	while ((ret = pcap_next_ex(ctx->pcap, &hdr, &data)) == 1)
		if (dump_frame(ctx, data, hdr->caplen))
			return -1;
	if (ret == PCAP_ERROR_BREAK)
		return 0;
	fprintf(stderr, "pcap_next_ex failed: %s\n", pcap_geterr(ctx->pcap));
	return -1;
	/* END TODO 2 */
}

static void close_ctx(struct dump_ctx *ctx)
{
	if (ctx->pcap)
		pcap_close(ctx->pcap);
	ctx->pcap = NULL;
}

/* --answers: each question, answered by answer() from the packets kept. */
static void print_answers(const struct dump_ctx *ctx)
{
	const char *const *q;
	char out[128];

	for (q = questions; *q; q++) {
		answer(*q, ctx->pkts, ctx->n, out, sizeof(out));
		printf("%s: %s\n", *q, out);
	}
}

int main(int argc, char **argv)
{
	struct course_opts o;
	struct dump_ctx ctx = { 0 };
	const char *want_answers;
	int ret;

	want_answers = course_take_opt(&argc, argv, "--answers", 0, usage);
	course_default_opts(&o);
	course_parse_opts(argc, argv, OPT_HOST, usage, &o);
	if (!o.host)
		course_usage_exit(argv[0], usage);
	ctx.file = o.host;
	ctx.answers = !!want_answers;

	if (open_ctx(&ctx))
		return 1;
	ret = dump_all(&ctx);
	if (ret)
		goto out_close;
	if (ctx.answers)
		print_answers(&ctx);
	else
		printf("%lu frames: %lu RoCE packets, %lu malformed, %lu other\n",
		       ctx.frames, ctx.roce - ctx.malformed, ctx.malformed,
		       ctx.other);
out_close:
	close_ctx(&ctx);
	free(ctx.pkts);
	return ret ? 1 : 0;
}
