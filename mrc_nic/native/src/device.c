/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device.c: devices and contexts. One device per host of the lab this
 * process runs in (its daemons' sockets in /run/mrc-nic/<lab>/), named
 * mrc_<host>, the process's own host first: a program that takes the first
 * device (perftest without -d) opens the NIC of the host it runs on.
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "native.h"

#include <poll.h>
#include <sys/eventfd.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* The lab and host: MRC_NIC_LAB and MRC_NIC_HOST (mrc-nic exec sets them),
 * else the network namespace this process runs in (/run/netns/mrc-<lab>-<host>). */
int nv_locate(char *lab, size_t lab_n, char *host, size_t host_n)
{
	const char *l = getenv("MRC_NIC_LAB"), *h = getenv("MRC_NIC_HOST");
	struct stat self, st;
	struct dirent *e;
	DIR *d;

	if (l && *l && h && *h) {
		snprintf(lab, lab_n, "%s", l);
		snprintf(host, host_n, "%s", h);
		return 0;
	}
	if (stat("/proc/self/ns/net", &self) || !(d = opendir("/run/netns")))
		return -ENODEV;
	while ((e = readdir(d))) {
		char path[512], *dash;

		if (strncmp(e->d_name, NV_NS_PREFIX, strlen(NV_NS_PREFIX)))
			continue;
		snprintf(path, sizeof(path), "/run/netns/%s", e->d_name);
		if (stat(path, &st) || st.st_ino != self.st_ino)
			continue;
		snprintf(lab, lab_n, "%s", e->d_name + strlen(NV_NS_PREFIX));
		dash = strchr(lab, '-'); /* lab names have no '-' (mrc_nic.lab.state) */
		if (!dash)
			continue;
		*dash = 0;
		snprintf(host, host_n, "%s", dash + 1);
		closedir(d);
		return 0;
	}
	closedir(d);
	return -ENODEV;
}

static int host_cmp(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	size_t lx = strlen(x), ly = strlen(y);

	return lx != ly ? (lx > ly) - (lx < ly) : strcmp(x, y); /* h2 before h10 */
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	char lab[NV_NAME], host[NV_NAME], dir[512];
	char *names[NV_MAX_DEVICES];
	struct ibv_device **list;
	struct dirent *e;
	int n = 0, k = 0;
	DIR *d;

	if (num_devices)
		*num_devices = 0;
	if (nv_locate(lab, sizeof(lab), host, sizeof(host))) {
		nv_log("no emulated NIC here: run the program with `mrc-nic exec HOST -- PROGRAM`");
		list = calloc(1, sizeof(*list));
		return list;
	}
	snprintf(dir, sizeof(dir), "%s/%s", NV_RUN_DIR, lab);
	d = opendir(dir);
	while (d && (e = readdir(d)) && n < NV_MAX_DEVICES) {
		size_t len = strlen(e->d_name);

		if (len > 5 && !strcmp(e->d_name + len - 5, ".sock") && strcmp(e->d_name, "events.sock") &&
		    len - 5 < NV_NAME)
			names[n++] = strndup(e->d_name, len - 5);
	}
	if (d)
		closedir(d);
	qsort(names, n, sizeof(names[0]), host_cmp);
	list = calloc(n + 1, sizeof(*list));
	for (int pass = 0; pass < 2 && list; pass++) {
		for (int i = 0; i < n; i++) {
			struct nv_device *dev;

			if ((pass == 0) != !strcmp(names[i], host))
				continue;
			dev = calloc(1, sizeof(*dev));
			if (!dev)
				break;
			dev->dev.node_type = IBV_NODE_CA;
			dev->dev.transport_type = IBV_TRANSPORT_IB;
			snprintf(dev->dev.name, sizeof(dev->dev.name), "mrc_%s", names[i]);
			snprintf(dev->dev.dev_name, sizeof(dev->dev.dev_name), "mrc_%s", names[i]);
			snprintf(dev->dev.dev_path, sizeof(dev->dev.dev_path), "%.180s/%.60s.sock", dir, names[i]);
			snprintf(dev->dev.ibdev_path, sizeof(dev->dev.ibdev_path), "%s", dev->dev.dev_path);
			snprintf(dev->lab, sizeof(dev->lab), "%s", lab);
			snprintf(dev->host, sizeof(dev->host), "%s", names[i]);
			dev->index = k;
			list[k++] = &dev->dev;
		}
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	if (!k && list)
		nv_log("lab %s has no host daemon running (%s): mrc-nic status", lab, dir);
	if (num_devices)
		*num_devices = k;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	for (int i = 0; list && list[i]; i++)
		free(list[i]);
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

int ibv_get_device_index(struct ibv_device *device)
{
	return ((struct nv_device *)device)->index;
}

/* A GUID from the host's name: stable, distinct per host. */
__be64 ibv_get_device_guid(struct ibv_device *device)
{
	__u64 h = 0xcbf29ce484222325ULL;

	for (const char *p = ((struct nv_device *)device)->host; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	return __builtin_bswap64(h);
}

static void close_maps(struct nv_context *nc)
{
	int *fds[] = { &nc->prog_fd, &nc->cq_lost_fd, &nc->db_fd };

	if (nc->cq_lost)
		munmap(nc->cq_lost, nc->cq_lost_len);
	nc->cq_lost = NULL;
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
	free(nc->db_frame);
	nc->db_frame = NULL;
}

/* What hello handed the session (docs/api.md, "Isolation"): the doorbell
 * program and nic_cq_lost (frozen: mapped read-only); and the host's doorbell
 * port, when this process may open a packet socket (root). */
static int open_maps(struct nv_context *nc)
{
	long long frame = 0;
	__u32 entries;
	int ret;

	nc->prog_fd = nv_reply_fd(&nc->sess, "kick_fd");
	nc->cq_lost_fd = nv_reply_fd(&nc->sess, "cq_lost_fd");
	if (nc->prog_fd < 0 || nc->cq_lost_fd < 0) {
		nv_log("the daemon of %s in lab %s handed over no doorbell (is it older than this "
		       "library? mrc-nic up --reuse)", nc->host, nc->lab);
		return -EPROTO;
	}
	if ((ret = nv_map_info(nc->cq_lost_fd, &entries, NULL)))
		return ret;
	nc->cq_lost_len = ((size_t)entries * 8 + 4095) & ~4095UL;
	nc->cq_lost = nv_mmap(nc->cq_lost_fd, nc->cq_lost_len, 0, PROT_READ);
	if (!nc->cq_lost)
		return -errno;
	nc->db_fd = nv_doorbell_open(&nc->db_frame_len);
	if (nc->db_fd < 0)
		nc->db_fd = -1; /* not root: kicks take the doorbell program */
	frame = nc->db_frame_len;
	if (nc->db_fd >= 0 && frame >= 14 + (long long)sizeof(struct nic_kick)) {
		/* the host's doorbell port: frames of struct nic_kick */
		nc->db_frame_len = (int)frame;
		nc->db_frame = calloc(1, nc->db_frame_len);
		if (!nc->db_frame)
			return -ENOMEM;
		nv_kick_template(nc->db_frame);
	} else if (nc->db_fd >= 0) {
		close(nc->db_fd);
		nc->db_fd = -1;
	}
	return 0;
}

/* The watcher: waits for the daemon's end of the session (a hangup, never its
 * replies, which the calls read) and marks the NIC dead. */
static void *watch_daemon(void *arg)
{
	struct nv_context *nc = arg;
	struct pollfd p[2] = { { .fd = nc->sess.fd, .events = POLLRDHUP },
			       { .fd = nc->watch_stop, .events = POLLIN } };

	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (p[1].revents)
			return NULL;
		if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
			__atomic_store_n(&nc->dead, 1, __ATOMIC_RELEASE);
			return NULL;
		}
	}
}

/* The NIC is gone: say so once, with how to bring it back (the lab's device
 * registry, as mrc_nic.contract.devices writes it); EIO. */
int nv_device_lost(struct nv_context *nc)
{
	char path[300], buf[4096], restart[512] = "mrc-nic up --reuse";
	FILE *f;

	if (__atomic_exchange_n(&nc->dead_told, 1, __ATOMIC_ACQ_REL))
		return EIO;
	snprintf(path, sizeof(path), "%s/%s/devices.json", NV_RUN_DIR, nc->lab);
	f = fopen(path, "r");
	if (f) {
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);

		buf[n] = 0;
		fclose(f);
		nv_json_str(buf, "restart", restart, sizeof(restart));
	}
	nv_log("the NIC of %s in lab '%s' is gone: its daemon died (IBV_EVENT_DEVICE_FATAL), its "
	       "QPs are in error; restart it with: %s, then close this context and open a new one",
	       nc->host, nc->lab, restart);
	return EIO;
}

int nv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int nv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int nv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int nv_req_notify_cq(struct ibv_cq *cq, int solicited_only);

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct nv_device *dev = (struct nv_device *)device;
	struct nv_context *nc = calloc(1, sizeof(*nc));
	long long v;
	int ret;

	if (!nc) {
		errno = ENOMEM;
		return NULL;
	}
	nc->prog_fd = nc->cq_lost_fd = nc->db_fd = nc->watch_stop = -1;
	snprintf(nc->lab, sizeof(nc->lab), "%s", dev->lab);
	snprintf(nc->host, sizeof(nc->host), "%s", dev->host);
	pthread_mutex_init(&nc->lock, NULL);
	if ((ret = nv_session_open(&nc->sess, nc->lab, nc->host)))
		goto fail;
	if ((ret = nv_call(&nc->sess, "{\"op\":\"app_hello\",\"pid\":%d}", getpid())))
		goto fail;
	struct {
		const char *key;
		int *into;
	} ints[] = { { "index", &nc->host_index },     { "planes", &nc->planes },
		     { "seg_size", &nc->seg_size },    { "sq_depth", &nc->sq_depth },
		     { "max_qp_wr", &nc->max_qp_wr }, { "cq_ring_bytes", &nc->cq_ring_bytes } };
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		if (nv_json_int(nc->sess.reply, ints[i].key, &v)) {
			ret = -EPROTO;
			goto fail;
		}
		*ints[i].into = (int)v;
	}
	if (!nv_json_int(nc->sess.reply, "max_mr_bytes", &v))
		nc->max_mr_bytes = v;
	if (!nv_json_int(nc->sess.reply, "max_mr_size", &v))
		nc->max_mr_size = v;
	for (int p = 0; p < nc->planes && p < NIC_MAX_PLANES; p++)
		nv_json_str_at(nc->sess.reply, "host_addrs", p, nc->gids[p], sizeof(nc->gids[p]));
	if ((ret = open_maps(nc)))
		goto fail;
	nc->ctx.device = device;
	nc->ctx.cmd_fd = -1;
	nc->ctx.async_fd = nc->sess.fd; /* readable when the daemon goes: the device failed */
	nc->ctx.num_comp_vectors = 1;
	pthread_mutex_init(&nc->ctx.mutex, NULL);
	nc->ctx.ops.post_send = nv_post_send;
	nc->ctx.ops.post_recv = nv_post_recv;
	nc->ctx.ops.poll_cq = nv_poll_cq;
	nc->ctx.ops.req_notify_cq = nv_req_notify_cq;
	nc->watch_stop = eventfd(0, EFD_CLOEXEC);
	if (nc->watch_stop < 0 || pthread_create(&nc->watcher, NULL, watch_daemon, nc)) {
		ret = -(errno ? errno : EAGAIN);
		goto fail;
	}
	return &nc->ctx;
fail:
	if (nc->watch_stop >= 0)
		close(nc->watch_stop);
	close_maps(nc);
	nv_session_close(&nc->sess);
	free(nc);
	errno = -ret;
	return NULL;
}

int ibv_close_device(struct ibv_context *context)
{
	struct nv_context *nc = (struct nv_context *)context;

	/* The daemon releases what the session made as it ends; this process's
	 * MR pages become its own memory again first. */
	void nv_release_mrs(struct nv_context * nc);
	eventfd_write(nc->watch_stop, 1); /* the watcher ends before the socket closes */
	pthread_join(nc->watcher, NULL);
	close(nc->watch_stop);
	nv_release_mrs(nc);
	close_maps(nc);
	nv_session_close(&nc->sess);
	free(nc);
	return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	struct nv_context *nc = (struct nv_context *)context;

	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "mrc-nic");
	attr->node_guid = ibv_get_device_guid(context->device);
	attr->sys_image_guid = attr->node_guid;
	attr->max_mr_size = nc->max_mr_size; /* the most one registration may have */
	attr->page_size_cap = 4096;
	attr->vendor_id = NV_VENDOR_ID;
	attr->vendor_part_id = 0;
	attr->hw_ver = 1;
	attr->max_qp = 1024;
	attr->max_qp_wr = nc->max_qp_wr;
	attr->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
	attr->max_sge = 16;
	attr->max_cq = 1024;
	attr->max_cqe = nc->cq_ring_bytes / (int)(sizeof(struct nic_event) + 8);
	attr->max_mr = 1024;
	attr->max_pd = 4096;
	attr->phys_port_cnt = 1;
	attr->max_pkeys = 1;
	return 0;
}

/* The exported symbol takes the older, shorter struct (verbs.h's inline
 * ibv_query_port calls it with the whole one, zeroed): fields up to
 * link_layer only. */
int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
		    struct _compat_ibv_port_attr *compat)
{
	struct nv_context *nc = (struct nv_context *)context;
	struct ibv_port_attr *attr = (struct ibv_port_attr *)compat;

	if (port_num != 1)
		return EINVAL;
	memset(attr, 0, offsetof(struct ibv_port_attr, flags));
	attr->state = IBV_PORT_ACTIVE;
	attr->max_mtu = IBV_MTU_4096;
	/* The NIC segments at seg_size whatever the QP asks (docs/api.md). */
	attr->active_mtu = nc->seg_size >= 2048 ? IBV_MTU_2048 : IBV_MTU_1024;
	attr->gid_tbl_len = 4;
	attr->port_cap_flags = 0;
	attr->max_msg_sz = 1U << 31;
	attr->pkey_tbl_len = 1;
	attr->lid = 0;
	attr->sm_lid = 0;
	attr->lmc = 0;
	attr->max_vl_num = 1;
	attr->active_width = 1;
	attr->active_speed = 1;
	attr->phys_state = 5; /* LinkUp */
	attr->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

/* Every index names the host's address on plane 0, IPv4-mapped as RoCE v2 lays
 * it out (::ffff:a.b.c.d): mrc_example reads index 3, perftest index 0. */
static int gid_of(struct nv_context *nc, int index, union ibv_gid *gid)
{
	unsigned a, b, c, d;

	if (index < 0 || index >= 4)
		return EINVAL;
	memset(gid, 0, sizeof(*gid));
	if (sscanf(nc->gids[0], "%u.%u.%u.%u", &a, &b, &c, &d) != 4)
		return EINVAL;
	gid->raw[10] = gid->raw[11] = 0xff;
	gid->raw[12] = a;
	gid->raw[13] = b;
	gid->raw[14] = c;
	gid->raw[15] = d;
	return 0;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	if (port_num != 1)
		return EINVAL;
	return gid_of((struct nv_context *)context, index, gid);
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	if (port_num != 1 || flags || entry_size < sizeof(*entry))
		return EINVAL;
	memset(entry, 0, sizeof(*entry));
	entry->gid_index = gid_index;
	entry->port_num = 1;
	entry->gid_type = IBV_GID_TYPE_ROCE_V2;
	entry->ndev_ifindex = 0;
	return gid_of((struct nv_context *)context, gid_index, &entry->gid);
}

int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	(void)context;
	if (port_num != 1 || index != 0)
		return EINVAL;
	*pkey = 0xffff;
	return 0;
}

/* The peer host a GID names: its address on some plane (IPv4-mapped or plain). */
int nv_gid_addr(const union ibv_gid *gid, char *out, size_t n)
{
	snprintf(out, n, "%u.%u.%u.%u", gid->raw[12], gid->raw[13], gid->raw[14], gid->raw[15]);
	return 0;
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	char c;

	/* The one asynchronous event here: the host's daemon went (DEVICE_FATAL). */
	if (recv(((struct nv_context *)context)->sess.fd, &c, 1, MSG_PEEK) > 0) {
		errno = EAGAIN;
		return -1;
	}
	memset(event, 0, sizeof(*event));
	event->event_type = IBV_EVENT_DEVICE_FATAL;
	return 0;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	(void)event;
}
