/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory.c: protection domains and memory regions.
 *
 * ibv_reg_mr registers the program's own buffer without a copy on the data
 * path: the daemon makes the MR's NIC memory, a map of its own that only
 * this session gets (memory_fd; docs/api.md, "Isolation"), whose bytes start
 * at the buffer's offset in its page; the library copies the buffer's pages
 * into it and maps it over them (MAP_FIXED). From then on the
 * program's pointer reads and writes NIC memory: what it writes is what the
 * NIC sends, what the NIC places it reads. Deregistering copies the pages
 * back into private memory at the same address. Those two copies are the
 * only ones.
 */
#include "native.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096UL

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct nv_context *nc = (struct nv_context *)context;
	struct nv_pd *pd = calloc(1, sizeof(*pd));
	long long v = 0;
	int ret;

	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&nc->lock);
	ret = nv_call(&nc->sess, "{\"op\":\"alloc_pd\"}");
	if (!ret)
		ret = nv_json_int(nc->sess.reply, "pd", &v);
	pthread_mutex_unlock(&nc->lock);
	if (ret) {
		free(pd);
		errno = -ret;
		return NULL;
	}
	pd->handle = (__u32)v;
	pd->pd.context = context;
	pd->pd.handle = pd->handle;
	return &pd->pd;
}

int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct nv_context *nc = (struct nv_context *)ibpd->context;
	struct nv_pd *pd = (struct nv_pd *)ibpd;
	int ret;

	ret = nv_ctx_call(nc, "{\"op\":\"dealloc_pd\",\"pd\":%u}", pd->handle);
	if (ret)
		return -ret;
	free(pd);
	return 0;
}

/* Put the MR's memory (memory_fd, from its start) over [start, start + len)
 * after copying what those pages hold. */
static int map_over(int memory_fd, void *start, size_t len)
{
	void *tmp;

	if (memory_fd < 0)
		return -EPROTO;
	tmp = nv_mmap(memory_fd, len, 0, PROT_READ | PROT_WRITE);
	if (!tmp)
		return -errno;
	memcpy(tmp, start, len);
	munmap(tmp, len);
	if (mmap(start, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memory_fd, 0) ==
	    MAP_FAILED)
		return -errno;
	return 0;
}

/* The program's pages become private memory again, holding what the NIC's did. */
static void map_back(struct nv_mr *m)
{
	void *copy = malloc(m->map_len);

	if (copy)
		memcpy(copy, m->map, m->map_len);
	if (mmap(m->map, m->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		 -1, 0) != MAP_FAILED &&
	    copy)
		memcpy(m->map, copy, m->map_len);
	free(copy);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	struct nv_context *nc = (struct nv_context *)ibpd->context;
	struct nv_pd *pd = (struct nv_pd *)ibpd;
	unsigned long a = (unsigned long)addr, page = a & ~(PAGE - 1);
	size_t map_len = ((a + length + PAGE - 1) & ~(PAGE - 1)) - page;
	long long region, rkey;
	struct nv_mr *m;
	int ret, memory_fd = -1;

	if (!addr || !length) {
		nv_log("reg_mr: a buffer of at least one byte is needed");
		errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&nc->lock);
	for (struct nv_mr *o = nc->mrs; o; o = o->next) {
		unsigned long lo = (unsigned long)o->map;

		if (page < lo + o->map_len && lo < page + map_len) {
			nv_log("reg_mr: bytes [%#lx, %#lx) share pages with an MR already registered "
			       "([%#lx, %#lx)): this NIC maps its memory over whole pages; register one "
			       "MR for both, or buffers in pages of their own",
			       a, a + length, (unsigned long)o->mr.addr,
			       (unsigned long)o->mr.addr + o->mr.length);
			pthread_mutex_unlock(&nc->lock);
			free(m);
			errno = EINVAL;
			return NULL;
		}
	}
	ret = nv_call(&nc->sess,
		      "{\"op\":\"reg_mr\",\"pd\":%u,\"length\":%zu,\"access\":%u,\"iova\":%llu,"
		      "\"page_off\":%lu}",
		      pd->handle, length, access & 3, (unsigned long long)iova, a - page);
	if (!ret && (nv_json_int(nc->sess.reply, "region", &region) ||
		     nv_json_int(nc->sess.reply, "rkey", &rkey)))
		ret = -EPROTO;
	if (!ret)
		memory_fd = nv_reply_fd(&nc->sess, "memory_fd");
	if (ret) {
		pthread_mutex_unlock(&nc->lock);
		free(m);
		errno = -ret;
		return NULL;
	}
	ret = map_over(memory_fd, (void *)page, map_len);
	if (memory_fd >= 0)
		close(memory_fd); /* the mapping keeps the memory */
	if (ret) {
		nv_log("reg_mr: cannot map NIC memory over the buffer: %s", strerror(-ret));
		nv_call(&nc->sess, "{\"op\":\"dereg_mr\",\"region\":%lld}", region);
		pthread_mutex_unlock(&nc->lock);
		free(m);
		errno = -ret;
		return NULL;
	}
	m->region = (__u32)region;
	m->iova = iova;
	m->region_off = a - page;
	m->map = (void *)page;
	m->map_len = map_len;
	m->mr.context = ibpd->context;
	m->mr.pd = ibpd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = (__u32)region;
	m->mr.lkey = (__u32)region;
	m->mr.rkey = (__u32)rkey;
	m->next = nc->mrs;
	nc->mrs = m;
	pthread_mutex_unlock(&nc->lock);
	return &m->mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			       int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

static void unlink_mr(struct nv_context *nc, struct nv_mr *m)
{
	for (struct nv_mr **p = &nc->mrs; *p; p = &(*p)->next) {
		if (*p == m) {
			*p = m->next;
			return;
		}
	}
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct nv_context *nc = (struct nv_context *)mr->context;
	struct nv_mr *m = (struct nv_mr *)mr;
	int ret;

	pthread_mutex_lock(&nc->lock);
	/* Pages first: once the daemon has it back, the window may be another MR's. */
	map_back(m);
	ret = nv_call(&nc->sess, "{\"op\":\"dereg_mr\",\"region\":%u}", m->region);
	unlink_mr(nc, m);
	pthread_mutex_unlock(&nc->lock);
	free(m);
	return ret ? -ret : 0;
}

/* The context closes: every MR's pages become the program's own again. */
void nv_release_mrs(struct nv_context *nc)
{
	while (nc->mrs) {
		struct nv_mr *m = nc->mrs;

		nc->mrs = m->next;
		map_back(m);
		free(m);
	}
}

/* The MR of this context whose lkey is lkey and which holds [addr, addr + len). */
struct nv_mr *nv_mr_find(struct nv_context *nc, __u32 lkey)
{
	for (struct nv_mr *m = nc->mrs; m; m = m->next)
		if (m->mr.lkey == lkey)
			return m;
	return NULL;
}
