/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bpfmaps.c: the NIC's maps as this process reaches them: the descriptors its
 * session was handed (docs/api.md, "Isolation"), their sizes (bpf(2)), mmap
 * of the mmapable ones, and kicks through the doorbell program.
 */
#include "native.h"

#include <errno.h>
#include <linux/bpf.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

int nv_map_info(int fd, __u32 *max_entries, __u32 *value_size)
{
	struct bpf_map_info info;
	union bpf_attr a;

	memset(&info, 0, sizeof(info));
	memset(&a, 0, sizeof(a));
	a.info.bpf_fd = fd;
	a.info.info_len = sizeof(info);
	a.info.info = (__u64)(unsigned long)&info;
	if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a))
		return -errno;
	if (max_entries)
		*max_entries = info.max_entries;
	if (value_size)
		*value_size = info.value_size;
	return 0;
}

/* n engine runs by one live-frames BPF_PROG_RUN (metadata: struct nic_kick). */
int nv_kick_run(int prog_fd, __u32 qpn, __u32 runs)
{
	unsigned char data[sizeof(struct nic_kick) + 64];
	struct nic_kick *k = (struct nic_kick *)data;
	struct xdp_md md;
	union bpf_attr a;

	memset(data, 0, sizeof(data));
	k->qpn = qpn;
	k->op = NIC_KICK_SEND;
	nv_kick_template(data + sizeof(*k));
	memset(&md, 0, sizeof(md));
	md.data = sizeof(*k);
	md.data_end = sizeof(data);
	memset(&a, 0, sizeof(a));
	a.test.prog_fd = prog_fd;
	a.test.data_in = (__u64)(unsigned long)data;
	a.test.data_size_in = sizeof(data);
	a.test.ctx_in = (__u64)(unsigned long)&md;
	a.test.ctx_size_in = sizeof(md);
	a.test.repeat = runs;
	a.test.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
	a.test.batch_size = runs;
	return sys_bpf(BPF_PROG_TEST_RUN, &a) ? -errno : 0;
}

/* The kick template frame's Ethernet header: broadcast, EtherType NIC_KICK_ETHERTYPE. */
void nv_kick_template(unsigned char *eth)
{
	memset(eth, 0xff, 6);
	memset(eth + 6, 0, 6);
	eth[12] = NIC_KICK_ETHERTYPE >> 8;
	eth[13] = NIC_KICK_ETHERTYPE & 0xff;
}

/* An AF_PACKET socket on this namespace's doorbell port and its frame size,
 * or -errno: no port, or no CAP_NET_RAW (a tenant: kicks take the doorbell
 * program, BPF_PROG_RUN; the daemon never hands a packet socket out, since
 * one can be bound or sent to the host's other ports). */
int nv_doorbell_open(int *frame_len)
{
	struct sockaddr_ll sll = { .sll_family = AF_PACKET };
	struct ifreq ifr;
	int one = 1, fd;

	fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	sll.sll_ifindex = if_nametoindex(NV_DOORBELL_IFNAME);
	memset(&ifr, 0, sizeof(ifr));
	strncpy(ifr.ifr_name, NV_DOORBELL_IFNAME, IFNAMSIZ - 1);
	if (!sll.sll_ifindex || bind(fd, (struct sockaddr *)&sll, sizeof(sll)) ||
	    ioctl(fd, SIOCGIFMTU, &ifr)) {
		int e = errno ? errno : ENODEV;

		close(fd);
		return -e;
	}
	setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
	*frame_len = ETH_HLEN + ifr.ifr_mtu;
	return fd;
}

void *nv_mmap(int fd, size_t len, off_t off, int prot)
{
	void *p = mmap(NULL, len, prot, MAP_SHARED, fd, off);

	return p == MAP_FAILED ? NULL : p;
}
