// SPDX-License-Identifier: MIT
/*
 * worksheet.c - lesson 04: the work-request worksheet, in C.
 *
 * Fill in the six TODOs. Each function's spec is the comment above it; the
 * types are in lessons/04-work-requests/worksheet.h. Check yourself with
 *
 *	make build LESSON=04
 *	build/skeletons/04-work-requests/worksheet_check
 *
 * No RDMA device is needed: nothing here calls into the device.
 */
#include "worksheet.h"

/*
 * Exercise A1. A registration pins whole pages and gives the NIC one
 * translation entry per page. Return how many pages the bytes
 * [addr, addr + len) touch; @page_size is a power of two. A buffer that does
 * not start on a page boundary pins the page it starts in as well, so it can
 * cost one page more than len / page_size (README, Common failures).
 * An empty buffer (len 0) touches no page.
 *
 *	ws_pages(0x7f0000000000, 1 GiB, 4096) == 262144
 *	ws_pages(0x1800, 4096, 4096)         == 2
 */
uint64_t ws_pages(uint64_t addr, uint64_t len, uint64_t page_size)
{
	/* TODO 1: index of the last page touched minus index of the first,
	 * plus one. Mind len == 0. */
	if (!len)
		return 0;
	return (addr + len - 1) / page_size - addr / page_size + 1;
	/* END TODO 1 */
}

/*
 * Exercise A2. Bytes of NIC translation table the registration of
 * [addr, addr + len) needs: one @entry_size-byte entry (a physical address)
 * per page it touches.
 *
 *	ws_table_bytes(0x7f0000000000, 1 GiB, 4096, 8) == 2097152 (2 MiB)
 */
uint64_t ws_table_bytes(uint64_t addr, uint64_t len, uint64_t page_size,
			uint64_t entry_size)
{
	/* TODO 2: pages times entry size (reuse ws_pages). */
	return ws_pages(addr, len, page_size) * entry_size;
	/* END TODO 2 */
}

/*
 * Exercise A3. The NIC can hold @table_capacity bytes of translation
 * entries. Return the largest page-aligned region it can map: as many whole
 * entries as fit, each mapping one page.
 *
 *	ws_max_registrable(1 MiB, 4096, 8) == 536870912 (512 MiB)
 */
uint64_t ws_max_registrable(uint64_t table_capacity, uint64_t page_size,
			    uint64_t entry_size)
{
	/* TODO 3: whole entries that fit, times the page each one maps. */
	return table_capacity / entry_size * page_size;
	/* END TODO 3 */
}

/*
 * Exercise B. Memory of a queue pair whose send queue holds @max_send_wr
 * work queue entries (WQEs) and whose receive queue holds @max_recv_wr, each
 * WQE @wqe_size bytes, plus the one completion queue both queues share. That
 * CQ must have room for a completion (CQE, @cqe_size bytes) for every work
 * request that can be outstanding on either queue at once. Compute in 64
 * bits: the results are uint64_t for a reason.
 *
 *	ws_qp_memory(128, 64, 64, 32) ==
 *		{ sq 8192, rq 4096, qp 12288, cq_entries 192, cq 6144 }
 */
struct ws_qp_mem ws_qp_memory(uint32_t max_send_wr, uint32_t max_recv_wr,
			      uint32_t wqe_size, uint32_t cqe_size)
{
	struct ws_qp_mem m = {};

	/* TODO 4: fill all five fields of m. */
	m.sq_bytes = (uint64_t)max_send_wr * wqe_size;
	m.rq_bytes = (uint64_t)max_recv_wr * wqe_size;
	m.qp_bytes = m.sq_bytes + m.rq_bytes;
	m.cq_entries = (uint64_t)max_send_wr + max_recv_wr;
	m.cq_bytes = m.cq_entries * cqe_size;
	/* END TODO 4 */
	return m;
}

/*
 * Exercise C. Fill *sge and *wr so that ibv_post_send(qp, wr, &bad) would
 * RDMA-WRITE the @length local bytes at @local_addr (registered, local key
 * @lkey) to @remote_addr in the peer's memory region (remote key @rkey):
 * one scatter/gather entry, a signaled completion carrying @wr_id, and no
 * further work request chained after this one.
 *
 * The caller's structs hold garbage, as a real program's stack would: every
 * field the device reads must be set, not just the ones that differ from
 * zero. man ibv_post_send lists them.
 */
void ws_fill_rdma_write(struct ibv_send_wr *wr, struct ibv_sge *sge,
			uint64_t wr_id, uint64_t local_addr, uint32_t lkey,
			uint64_t remote_addr, uint32_t rkey, uint32_t length)
{
	/* TODO 5: fill *sge, then *wr (designated initializers help). */
	*sge = (struct ibv_sge){
		.addr = local_addr,
		.length = length,
		.lkey = lkey,
	};
	*wr = (struct ibv_send_wr){
		.wr_id = wr_id,
		.next = NULL,
		.sg_list = sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma.remote_addr = remote_addr,
		.wr.rdma.rkey = rkey,
	};
	/* END TODO 5 */
}

/*
 * Exercise D. One round trip, as the requester sees it, from the costs in *c.
 *
 * Over a socket, a request and its response are two messages and the CPUs
 * at both ends handle each: the requester calls send(), the responder
 * recv(), then the responder send() and the requester recv(); add the
 * network round trip.
 *
 * With a one-sided RDMA operation (a READ, or a WRITE waiting for its
 * acknowledgement) only the requester's CPU works: it posts the work
 * request, the NIC crosses the network and back, the requester polls one
 * completion. The responder's CPU does nothing.
 *
 * speedup = socket time / RDMA time.
 *
 *	25, 25, 0.5, 0.5, 5 us  ->  socket 105 us, RDMA 6 us, speedup 17.5
 */
struct ws_round_trip ws_round_trips(const struct ws_costs *c)
{
	struct ws_round_trip r = {};

	/* TODO 6: fill r.socket_us, r.rdma_us and r.speedup. */
	r.socket_us = 2 * (c->sock_send_us + c->sock_recv_us) + c->net_rtt_us;
	r.rdma_us = c->post_send_us + c->net_rtt_us + c->poll_cq_us;
	r.speedup = r.socket_us / r.rdma_us;
	/* END TODO 6 */
	return r;
}
