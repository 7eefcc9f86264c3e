/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verbs_pattern: a plain libibverbs program that checks the emulated NIC
 * byte for byte (tests/lab/test_native_verbs.py builds and runs it through
 * `mrc-nic exec`, which preloads mrc-nic's verbs library).
 *
 *   verbs_pattern server PORT           (on the receiving host)
 *   verbs_pattern client ADDR PORT      (on the sending host)
 *
 * Each side registers a buffer that starts 100 bytes into a page, makes two
 * RC QPs (A and B) and swaps QPN, rkey and address with the peer over TCP.
 * The client then, each step followed by a TCP handshake in which the server
 * checks its whole buffer against what it must hold:
 *   1. WRITEs of odd lengths at odd offsets, then a WRITE_WITH_IMM: the
 *      server waits for the receive completion on a completion channel;
 *   2. SEND: refused at post time (EINVAL), nothing sent;
 *   3. more WRs than max_send_wr in one post: ENOMEM at the first one past;
 *   4. QP A, a wrong rkey: REM_ACCESS_ERR, nothing written;
 *   5. QP B (untouched by A's error) writes, then a WRITE past the peer's
 *      MR: REM_ACCESS_ERR, nothing written.
 * Every check prints "ok <what>" or "FAIL <what>" (and exit 1).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 20000
#define OFF 100
#define MAX_WR 8

struct peer {
	uint32_t qpn[2];
	uint32_t rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static int sock = -1;
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static struct ibv_cq *cq;
static struct ibv_comp_channel *ch;
static struct ibv_qp *qp[2];
static unsigned char *buf, expect[BUF];

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok" : "FAIL", what);
	fflush(stdout);
	if (!ok)
		exit(1);
}

/* Plumbing: said only when it fails. */
static void need(int ok, const char *what)
{
	if (!ok)
		check(0, what);
}

static void xfer(void *p, size_t n, int out)
{
	for (size_t at = 0; at < n;) {
		ssize_t r = out ? write(sock, (char *)p + at, n - at) : read(sock, (char *)p + at, n - at);

		need(r > 0, out ? "tcp send" : "tcp receive");
		at += r;
	}
}

/* The client says a step is done; the server checks its buffer and answers. */
static void step(int server, const char *what)
{
	char c = 1;

	if (server) {
		xfer(&c, 1, 0);
		usleep(100000); /* a refused WRITE is never placed: give it time to be */
		check(!memcmp(buf, expect, BUF), what);
		xfer(&c, 1, 1);
	} else {
		xfer(&c, 1, 1);
		xfer(&c, 1, 0);
	}
}

static struct ibv_wc wait_wc(void)
{
	struct ibv_wc wc;

	for (int spins = 0; spins < 20000000; spins++) {
		int n = ibv_poll_cq(cq, 1, &wc);

		need(n >= 0, "poll_cq");
		if (n)
			return wc;
	}
	check(0, "a completion within the time");
	return wc;
}

static void connect_qp(struct ibv_qp *q, const struct peer *p, uint32_t qpn)
{
	struct ibv_qp_attr a = { 0 };

	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	check(!ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS),
	      "modify_qp INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = p->gid;
	a.ah_attr.grh.hop_limit = 0xff;
	a.ah_attr.port_num = 1;
	check(!ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MIN_RNR_TIMER |
					 IBV_QP_MAX_DEST_RD_ATOMIC),
	      "modify_qp RTR with perftest's RC attributes");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	check(!ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					 IBV_QP_MAX_QP_RD_ATOMIC),
	      "modify_qp RTS with perftest's RC attributes");
}

static int post_write(struct ibv_qp *q, size_t off, size_t len, uint64_t raddr, uint32_t rkey,
		      enum ibv_wr_opcode op, uint32_t imm, int signaled)
{
	struct ibv_sge sge = { (uintptr_t)(buf + off), (uint32_t)len, mr->lkey };
	struct ibv_send_wr wr = { 0 }, *bad;

	wr.wr_id = off;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(q, &wr, &bad);
}

int main(int argc, char **argv)
{
	int server = argc == 3 && !strcmp(argv[1], "server");
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct ibv_qp_init_attr init = { 0 };
	struct peer me = { 0 }, peer;
	struct ibv_device **devs;
	void *page = NULL;

	if (!server && !(argc == 4 && !strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server PORT | client ADDR PORT\n", argv[0]);
		return 2;
	}
	devs = ibv_get_device_list(NULL);
	check(devs && devs[0], "a device");
	ctx = ibv_open_device(devs[0]);
	check(ctx != NULL, "open_device");
	pd = ibv_alloc_pd(ctx);
	check(pd != NULL, "alloc_pd");
	check(!posix_memalign(&page, 4096, BUF + 2 * 4096), "memory");
	buf = (unsigned char *)page + OFF;
	memset(buf, 0, BUF);
	mr = ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	check(mr != NULL, "reg_mr of a buffer 100 bytes into a page");
	ch = ibv_create_comp_channel(ctx);
	check(ch != NULL, "create_comp_channel");
	cq = ibv_create_cq(ctx, 64, NULL, ch, 0);
	check(cq != NULL, "create_cq");
	init.send_cq = init.recv_cq = cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = MAX_WR;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = init.cap.max_recv_sge = 1;
	for (int i = 0; i < 2; i++) {
		qp[i] = ibv_create_qp(pd, &init);
		check(qp[i] != NULL, "create_qp");
		me.qpn[i] = qp[i]->qp_num;
	}
	me.rkey = mr->rkey;
	me.addr = (uintptr_t)buf;
	check(!ibv_query_gid(ctx, 1, 0, &me.gid), "query_gid");

	sa.sin_port = htons(atoi(argv[server ? 2 : 3]));
	if (server) {
		int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		check(!bind(l, (struct sockaddr *)&sa, sizeof(sa)) && !listen(l, 1), "listen");
		sock = accept(l, NULL, NULL);
	} else {
		sock = socket(AF_INET, SOCK_STREAM, 0);
		inet_pton(AF_INET, argv[2], &sa.sin_addr);
		for (int i = 0; i < 100 && connect(sock, (struct sockaddr *)&sa, sizeof(sa)); i++)
			usleep(100000);
	}
	xfer(&me, sizeof(me), 1);
	xfer(&peer, sizeof(peer), 0);
	for (int i = 0; i < 2; i++)
		connect_qp(qp[i], &peer, peer.qpn[i]);

	/* 1. a pattern of WRITEs at odd offsets and lengths, then WRITE_WITH_IMM */
	static const size_t pieces[][2] = { { 1, 7 }, { 8, 64 }, { 1000, 1500 },
					     { 4095, 3 }, { 5001, 9000 }, { 19990, 10 } };
	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
		for (size_t k = 0; k < pieces[i][1]; k++)
			expect[pieces[i][0] + k] = (unsigned char)(pieces[i][0] * 31 + k * 7 + 1);
	memcpy(expect + 16000, "imm!", 4);
	if (server) {
		struct ibv_recv_wr rwr = { .wr_id = 99 }, *rbad;
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		struct ibv_wc wc;

		check(!ibv_post_recv(qp[0], &rwr, &rbad), "post_recv");
		check(!ibv_req_notify_cq(cq, 0), "req_notify_cq");
		check(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == cq, "get_cq_event");
		ibv_ack_cq_events(ev_cq, 1);
		wc = wait_wc();
		check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
			      wc.wr_id == 99 && ntohl(wc.imm_data) == 0xC0FFEE && wc.byte_len == 4,
		      "WRITE_WITH_IMM's receive completion, immediate and length");
		step(1, "the WRITEs' bytes, each at its byte, nothing else written");
	} else {
		memcpy(buf, expect, BUF);
		for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
			check(!post_write(qp[0], pieces[i][0], pieces[i][1], peer.addr + pieces[i][0],
					  peer.rkey, IBV_WR_RDMA_WRITE, 0, 0),
			      "post_send WRITE");
		check(!post_write(qp[0], 16000, 4, peer.addr + 16000, peer.rkey,
				  IBV_WR_RDMA_WRITE_WITH_IMM, 0xC0FFEE, 1),
		      "post_send WRITE_WITH_IMM");
		struct ibv_wc wc = wait_wc();

		check(wc.status == IBV_WC_SUCCESS && wc.wr_id == 16000, "the signaled WR completes");
		step(0, "");
	}

	/* 2. SEND: refused at post time, nothing sent */
	if (!server)
		check(post_write(qp[0], 0, 8, 0, 0, IBV_WR_SEND, 0, 1) == EINVAL,
		      "SEND is refused at post time with EINVAL");
	step(server, "nothing written by a refused SEND");

	/* 3. past max_send_wr in one post */
	if (!server) {
		struct ibv_sge sge = { (uintptr_t)buf, 8, mr->lkey };
		struct ibv_send_wr wrs[MAX_WR + 1], *bad = NULL;
		int ret, n = 0;

		memset(wrs, 0, sizeof(wrs));
		for (int i = 0; i <= MAX_WR; i++) {
			wrs[i].wr_id = 1000 + i;
			wrs[i].sg_list = &sge;
			wrs[i].num_sge = 1;
			wrs[i].opcode = IBV_WR_RDMA_WRITE;
			wrs[i].send_flags = IBV_SEND_SIGNALED;
			wrs[i].wr.rdma.remote_addr = peer.addr;
			wrs[i].wr.rdma.rkey = peer.rkey;
			wrs[i].next = i < MAX_WR ? &wrs[i + 1] : NULL;
		}
		ret = ibv_post_send(qp[0], wrs, &bad);
		check(ret == ENOMEM && bad == &wrs[MAX_WR],
		      "a post past max_send_wr: ENOMEM at the first WR past it");
		for (; n < MAX_WR; n++) {
			struct ibv_wc wc = wait_wc();

			if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 1000 + (uint64_t)n)
				break;
		}
		check(n == MAX_WR, "the WRs before it complete, in order");
	}
	step(server, "the WRs within max_send_wr wrote their (same) bytes");

	/* 4. a wrong rkey: REM_ACCESS_ERR, nothing written */
	if (!server) {
		memset(buf + 200, 0xEE, 50);
		check(!post_write(qp[0], 200, 50, peer.addr + 200, peer.rkey ^ 0x10000, IBV_WR_RDMA_WRITE,
				  0, 1),
		      "post_send with a wrong rkey");
		struct ibv_wc wc = wait_wc();

		check(wc.status == IBV_WC_REM_ACCESS_ERR, "a wrong rkey completes REM_ACCESS_ERR");
		check(post_write(qp[0], 200, 50, peer.addr + 200, peer.rkey, IBV_WR_RDMA_WRITE, 0, 1) == 0,
		      "post to the QP in ERR");
		wc = wait_wc();
		check(wc.status == IBV_WC_WR_FLUSH_ERR, "the QP in ERR flushes what comes after");
	}
	step(server, "nothing written with a wrong rkey");

	/* 5. QP B still works; then an address past the peer's MR */
	if (server) {
		memset(expect + 300, 0xAB, 16);
	} else {
		memset(buf + 300, 0xAB, 16);
		check(!post_write(qp[1], 300, 16, peer.addr + 300, peer.rkey, IBV_WR_RDMA_WRITE, 0, 1),
		      "post_send on QP B");
		struct ibv_wc wc = wait_wc();

		check(wc.status == IBV_WC_SUCCESS && wc.qp_num == qp[1]->qp_num,
		      "QP B completes: A's error hurt nothing else");
		check(!post_write(qp[1], 0, 16, peer.addr + BUF - 8, peer.rkey, IBV_WR_RDMA_WRITE, 0, 1),
		      "post_send past the peer's MR");
		wc = wait_wc();
		check(wc.status == IBV_WC_REM_ACCESS_ERR, "a WRITE past the MR completes REM_ACCESS_ERR");
	}
	step(server, "QP B's bytes, and nothing of the WRITE past the MR");

	for (int i = 0; i < 2; i++)
		check(!ibv_destroy_qp(qp[i]), "destroy_qp");
	check(!ibv_destroy_cq(cq), "destroy_cq");
	check(!ibv_destroy_comp_channel(ch), "destroy_comp_channel");
	check(!ibv_dereg_mr(mr), "dereg_mr");
	check(!ibv_dealloc_pd(pd), "dealloc_pd");
	check(!ibv_close_device(ctx), "close_device");
	ibv_free_device_list(devs);
	printf("PASS\n");
	return 0;
}
