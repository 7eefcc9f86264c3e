/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mrc_pattern: a program on the OCP MRC API (mrc.h) as OCP's mrc_example
 * uses it, built against mrc-nic's include/mrc.h and lib_mrc.so
 * (tests/lab/test_native_verbs.py). The client WRITEs 3000 bytes at an odd
 * offset, then signals with an 8-byte WRITE_WITH_IMM; the server, its
 * receive posted with no SGE, checks the immediate and every byte.
 *
 *   mrc_pattern server PORT | mrc_pattern client ADDR PORT
 */
#include <arpa/inet.h>
#include <mrc.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 8192

struct wire {
	uint32_t qpn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok" : "FAIL", what);
	fflush(stdout);
	if (!ok)
		exit(1);
}

static struct ibv_wc wait_wc(struct mrc_cq *cq)
{
	struct ibv_wc wc;

	for (long spins = 0; spins < 20000000; spins++)
		if (mrc_poll_cq(cq, 1, &wc) == 1)
			return wc;
	check(0, "a completion within the time");
	return wc;
}

int main(int argc, char **argv)
{
	int server = argc == 3 && !strcmp(argv[1], "server"), supported = 0, s;
	struct ibv_device **devs = ibv_get_device_list(NULL);
	struct mrc_context_attr cattr = { .mrc_api_version_used = MRC_PROTOCOL_VERSION_1 };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct mrc_qp_init_attr qattr = { 0 };
	struct mrc_device_attr dattr;
	struct wire me = { 0 }, peer;
	unsigned char *buf, *page = NULL;

	if (!server && !(argc == 4 && !strcmp(argv[1], "client")))
		return 2;
	check(devs && devs[0], "a device");
	struct ibv_context *v = ibv_open_device(devs[0]);
	check(v && !mrc_query_device(v, &dattr, &supported) && supported, "mrc_query_device");
	check(dattr.mrc_protocol_version & MRC_PROTOCOL_VERSION_1, "protocol version 1 offered");
	struct mrc_context *ctx = mrc_create_context(v, &cattr);
	struct ibv_pd *pd = ibv_alloc_pd(v);
	check(ctx && pd && !posix_memalign((void **)&page, 4096, BUF + 4096), "context, pd");
	buf = page + 5;
	memset(buf, 0, BUF);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct mrc_cq *scq = mrc_create_cq(ctx, 256, NULL, NULL, 0);
	struct mrc_cq *rcq = mrc_create_cq(ctx, 256, NULL, NULL, 0);
	check(mr && scq && rcq, "reg_mr, mrc_create_cq");
	qattr.send_cq = scq;
	qattr.recv_cq = rcq;
	qattr.pd = pd;
	qattr.cap.max_send_wr = 16;
	qattr.cap.max_recv_wr = 1;
	qattr.cap.max_send_sge = qattr.cap.max_recv_sge = 1;
	qattr.protocol_version = MRC_PROTOCOL_VERSION_1;
	struct mrc_qp *qp = mrc_create_qp(ctx, &qattr);
	check(qp && !mrc_get_qpn(qp, &me.qpn), "mrc_create_qp, mrc_get_qpn");
	me.rkey = mr->rkey;
	me.addr = (uintptr_t)buf;
	check(!ibv_query_gid(v, 1, 3, &me.gid), "ibv_query_gid index 3");

	sa.sin_port = htons(atoi(argv[server ? 2 : 3]));
	if (server) {
		int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		check(!bind(l, (struct sockaddr *)&sa, sizeof(sa)) && !listen(l, 1), "listen");
		s = accept(l, NULL, NULL);
	} else {
		s = socket(AF_INET, SOCK_STREAM, 0);
		inet_pton(AF_INET, argv[2], &sa.sin_addr);
		for (int i = 0; i < 100 && connect(s, (struct sockaddr *)&sa, sizeof(sa)); i++)
			usleep(100000);
	}
	check(write(s, &me, sizeof(me)) == sizeof(me) && read(s, &peer, sizeof(peer)) == sizeof(peer),
	      "exchange");

	/* The transitions as OCP's example makes them, with MRC attributes too. */
	struct ibv_qp_attr a = { 0 };
	struct mrc_qp_attr m = { 0 };

	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	m.profile.ev_profile_id = 0;
	check(!mrc_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS, &m, MRC_EV_PROFILE_ID),
	      "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer.gid;
	a.ah_attr.port_num = 1;
	a.dest_qp_num = peer.qpn;
	m.wimm.max_wimm_dest = 8;
	check(!mrc_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					 IBV_QP_PATH_MTU, &m, MRC_QP_MAX_WIMM_DEST),
	      "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 7;
	a.retry_cnt = 14; /* as OCP's example: more than MRC's linear 7, taken as 7 */
	a.rnr_retry = 14;
	m.wimm.max_wimm = 8;
	check(!mrc_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT, &m, MRC_QP_MAX_WIMM),
	      "RTS with OCP's example's verbs attributes");

	for (int i = 0; i < 3000; i++)
		buf[5 + i] = (unsigned char)(i * 13 + 7);
	memcpy(buf + 4000, "signal!!", 8);
	if (server) {
		struct ibv_recv_wr rwr = { .wr_id = 42 }, *rbad;
		unsigned char want[BUF] = { 0 };

		memcpy(want, buf, BUF);
		memset(buf, 0, BUF);
		check(!mrc_post_recv(qp, &rwr, &rbad), "mrc_post_recv with no SGE");
		check(write(s, "r", 1) == 1, "ready");
		struct ibv_wc wc = wait_wc(rcq);

		check(wc.status == IBV_WC_SUCCESS && wc.wr_id == 42 && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
			      ntohl(wc.imm_data) == 0x5151,
		      "WRITE_WITH_IMM received with its immediate");
		check(!memcmp(buf, want, BUF), "every byte where it was written, nothing else");
	} else {
		struct ibv_sge sge = { (uintptr_t)(buf + 5), 3000, mr->lkey };
		struct ibv_sge sig = { (uintptr_t)(buf + 4000), 8, mr->lkey };
		struct ibv_send_wr w2 = { .wr_id = 2, .sg_list = &sig, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					  .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0x5151) };
		struct ibv_send_wr w1 = { .wr_id = 1, .next = &w2, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE }, *bad;
		char c;

		w1.wr.rdma.remote_addr = peer.addr + 5;
		w1.wr.rdma.rkey = peer.rkey;
		w2.wr.rdma.remote_addr = peer.addr + 4000;
		w2.wr.rdma.rkey = peer.rkey;
		check(read(s, &c, 1) == 1, "the server's receive is posted");
		check(!mrc_post_send(qp, &w1, &bad), "mrc_post_send WRITE + WRITE_WITH_IMM");
		struct ibv_wc wc = wait_wc(scq);

		check(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2, "the signaled WR completes");
	}
	check(!mrc_destroy_qp(qp) && !mrc_destroy_cq(scq) && !mrc_destroy_cq(rcq), "destroys");
	check(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd) && !mrc_destroy_context(ctx), "release");
	check(!ibv_close_device(v), "close");
	ibv_free_device_list(devs);
	printf("PASS\n");
	return 0;
}
