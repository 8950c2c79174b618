/* SPDX-License-Identifier: MIT */
/*
 * worksheet.h - lesson 04's paper worksheet, as functions.
 *
 * You implement these in skeletons/04-work-requests/worksheet.c (the comment
 * above each function there is its full spec). The driver
 * lessons/04-work-requests/worksheet_check.c calls them: with no arguments
 * it checks the worksheet's own numbers and prints PASS/FAIL per exercise;
 * with --cases it evaluates the cases it reads on stdin (the grader's way).
 *
 * Nothing here touches an RDMA device: it is arithmetic and struct filling.
 */
#ifndef WORKSHEET_H
#define WORKSHEET_H

#include <stdint.h>
#include <infiniband/verbs.h>

/* ---- Exercise A: what a memory registration costs the NIC --------------- */

/* Pages the bytes [addr, addr + len) touch (0 when len is 0). */
uint64_t ws_pages(uint64_t addr, uint64_t len, uint64_t page_size);

/* Bytes of translation table for that registration: one entry per page. */
uint64_t ws_table_bytes(uint64_t addr, uint64_t len, uint64_t page_size,
			uint64_t entry_size);

/* Largest (page-aligned) region whose table fits in @table_capacity bytes. */
uint64_t ws_max_registrable(uint64_t table_capacity, uint64_t page_size,
			    uint64_t entry_size);

/* ---- Exercise B: what a queue pair and its completion queue cost -------- */

struct ws_qp_mem {
	uint64_t sq_bytes;	/* send queue: max_send_wr WQEs */
	uint64_t rq_bytes;	/* receive queue: max_recv_wr WQEs */
	uint64_t qp_bytes;	/* both queues */
	uint64_t cq_entries;	/* one CQ shared by both queues */
	uint64_t cq_bytes;
};

struct ws_qp_mem ws_qp_memory(uint32_t max_send_wr, uint32_t max_recv_wr,
			      uint32_t wqe_size, uint32_t cqe_size);

/* ---- Exercise C: an RDMA WRITE work request ----------------------------- */

void ws_fill_rdma_write(struct ibv_send_wr *wr, struct ibv_sge *sge,
			uint64_t wr_id, uint64_t local_addr, uint32_t lkey,
			uint64_t remote_addr, uint32_t rkey, uint32_t length);

/* ---- Exercise D: one round trip, sockets vs RDMA ------------------------ */

/* What each step costs, in microseconds. */
struct ws_costs {
	double sock_send_us;	/* one send() call */
	double sock_recv_us;	/* one recv() call */
	double post_send_us;	/* one ibv_post_send() */
	double poll_cq_us;	/* one successful ibv_poll_cq() */
	double net_rtt_us;	/* the wire and switches, there and back */
};

struct ws_round_trip {
	double socket_us;	/* request + response over a socket */
	double rdma_us;		/* one one-sided RDMA operation */
	double speedup;		/* socket_us / rdma_us */
};

struct ws_round_trip ws_round_trips(const struct ws_costs *c);

#endif /* WORKSHEET_H */
