/* SPDX-License-Identifier: Apache-2.0 */
/*
 * session.c: the host daemon's control socket, as mrc_nic.lab.client speaks it.
 * One JSON object per line each way; setup only (docs/daemon.md lists the
 * operations). The replies are read with a small scanner that finds a
 * top-level key: the library needs a few integers and strings of each. A
 * reply may hand over file descriptors (SCM_RIGHTS): its line names each one's
 * position among them (nv_reply_fd).
 */
#include "native.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

const char *nv_run_dir(void)
{
	const char *d = getenv("MRC_NIC_RUN_DIR"); /* as mrc_nic.lab.state */

	return d && *d ? d : NV_RUN_DIR_DEFAULT;
}

int nv_session_open(struct nv_session *s, const char *lab, const char *host)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	s->fd = -1;
	s->nfds = 0;
	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s/%s.sock", NV_RUN_DIR, lab, host) >=
	    (int)sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->fd < 0)
		return -errno;
	if (connect(s->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int e = errno;

		nv_log("cannot reach the daemon of %s in lab %s (%s: %s); is the lab up? (mrc-nic status)",
		       host, lab, sa.sun_path, strerror(e));
		close(s->fd);
		s->fd = -1;
		return -e;
	}
	s->len = 0;
	return 0;
}

/* Descriptors a reply handed over that nothing took: closed. */
static void drop_fds(struct nv_session *s)
{
	for (int i = 0; i < s->nfds; i++)
		if (s->fds[i] >= 0)
			close(s->fds[i]);
	s->nfds = 0;
}

void nv_session_close(struct nv_session *s)
{
	drop_fds(s);
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

/* recv, keeping the descriptors that come with the bytes (SCM_RIGHTS). */
static ssize_t recv_with_fds(struct nv_session *s, char *buf, size_t n)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * NV_FDS_MAX)];
		struct cmsghdr align;
	} control;
	struct iovec iov = { .iov_base = buf, .iov_len = n };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			      .msg_controllen = sizeof(control.buf) };
	ssize_t r = recvmsg(s->fd, &msg, MSG_CMSG_CLOEXEC);

	if (r < 0)
		return r;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *fds = (int *)CMSG_DATA(c);

		for (int i = 0; i < count; i++) {
			if (s->nfds < NV_FDS_MAX)
				s->fds[s->nfds++] = fds[i];
			else
				close(fds[i]);
		}
	}
	return r;
}

/* The descriptor a reply's key names (its position among the reply's), now
 * the caller's; -1 if the key is absent or -1. */
int nv_reply_fd(struct nv_session *s, const char *key)
{
	long long at;
	int fd;

	if (nv_json_int(s->reply, key, &at) || at < 0 || at >= s->nfds)
		return -1;
	fd = s->fds[at];
	s->fds[at] = -1;
	return fd;
}

/* Send one request (printf-style JSON object) and read its reply line into
 * s->reply. Returns 0, or -errno: the daemon's refusal (its errno name) or
 * a broken connection (EIO). A refusal's message is logged. */
static int vcall(struct nv_session *s, const char *fmt, va_list ap)
{
	char req[NV_LINE];
	int n;

	drop_fds(s); /* the last reply's that nothing took */
	n = vsnprintf(req, sizeof(req) - 1, fmt, ap);
	if (n < 0 || n >= (int)sizeof(req) - 1)
		return -E2BIG;
	req[n++] = '\n';
	for (int off = 0; off < n;) {
		ssize_t w = send(s->fd, req + off, n - off, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -EIO;
		off += w;
	}
	for (;;) {
		char *nl = memchr(s->buf, '\n', s->len);

		if (nl) {
			size_t line = nl - s->buf;

			memcpy(s->reply, s->buf, line);
			s->reply[line] = 0;
			memmove(s->buf, nl + 1, s->len - line - 1);
			s->len -= line + 1;
			break;
		}
		if (s->len >= sizeof(s->buf))
			return -EPROTO;
		ssize_t r = recv_with_fds(s, s->buf + s->len, sizeof(s->buf) - s->len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EIO;
		s->len += r;
	}
	if (strstr(s->reply, "\"ok\":true"))
		return 0;
	char name[32] = "", msg[512] = "refused";

	nv_json_str(s->reply, "errno", name, sizeof(name));
	nv_json_str(s->reply, "message", msg, sizeof(msg));
	nv_log("%s", msg);
	n = nv_errno_of(name);
	return -(n ? n : EIO);
}

int nv_call(struct nv_session *s, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = vcall(s, fmt, ap);
	va_end(ap);
	return ret;
}

/* nv_call on a context's session, under its lock, for a call whose reply
 * says nothing more than ok. */
int nv_ctx_call(struct nv_context *nc, const char *fmt, ...)
{
	va_list ap;
	int ret;

	pthread_mutex_lock(&nc->lock);
	va_start(ap, fmt);
	ret = vcall(&nc->sess, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&nc->lock);
	return ret;
}

/* The value of a top-level key of a JSON object: a pointer to its first
 * character, or NULL. */
static const char *find_key(const char *json, const char *key)
{
	size_t klen = strlen(key);
	int depth = 0;

	for (const char *p = json; *p; p++) {
		if (*p == '"') {
			const char *start = ++p;

			while (*p && *p != '"')
				p += (*p == '\\' && p[1]) ? 2 : 1;
			if (!*p)
				return NULL;
			if (depth == 1 && (size_t)(p - start) == klen && !memcmp(start, key, klen)) {
				const char *v = p + 1;

				while (isspace((unsigned char)*v))
					v++;
				if (*v == ':') {
					v++;
					while (isspace((unsigned char)*v))
						v++;
					return v;
				}
			}
		} else if (*p == '{' || *p == '[') {
			depth++;
		} else if (*p == '}' || *p == ']') {
			depth--;
		}
	}
	return NULL;
}

int nv_json_int(const char *json, const char *key, long long *out)
{
	const char *v = find_key(json, key);
	char *end;

	if (!v)
		return -ENOENT;
	*out = strtoll(v, &end, 10);
	return end == v ? -EINVAL : 0;
}

/* A string value (simple escapes undone), or the idx-th string of an array
 * value with nv_json_str_at. */
static int copy_str(const char *v, char *out, size_t n)
{
	size_t i = 0;

	if (*v != '"')
		return -EINVAL;
	for (v++; *v && *v != '"'; v++) {
		char c = *v;

		if (c == '\\' && v[1]) {
			c = *++v;
			c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
		}
		if (i + 1 < n)
			out[i++] = c;
	}
	if (n)
		out[i] = 0;
	return 0;
}

int nv_json_str(const char *json, const char *key, char *out, size_t n)
{
	const char *v = find_key(json, key);

	return v ? copy_str(v, out, n) : -ENOENT;
}

int nv_json_str_at(const char *json, const char *key, int idx, char *out, size_t n)
{
	const char *v = find_key(json, key);

	if (!v || *v != '[')
		return -ENOENT;
	v++;
	for (int i = 0;; i++) {
		while (isspace((unsigned char)*v) || *v == ',')
			v++;
		if (*v != '"')
			return -ENOENT;
		if (i == idx)
			return copy_str(v, out, n);
		for (v++; *v && *v != '"'; v += (*v == '\\' && v[1]) ? 2 : 1)
			;
		if (!*v)
			return -ENOENT;
		v++;
	}
}

int nv_errno_of(const char *name)
{
	static const struct {
		const char *name;
		int code;
	} codes[] = {
		{ "EINVAL", EINVAL }, { "ENOMEM", ENOMEM }, { "ENOENT", ENOENT },
		{ "EBUSY", EBUSY },   { "ENOSPC", ENOSPC }, { "EPERM", EPERM },
		{ "EEXIST", EEXIST }, { "EAGAIN", EAGAIN }, { "EOPNOTSUPP", EOPNOTSUPP },
		{ "EPROTO", EPROTO }, { "ENODEV", ENODEV },
	};

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (!strcmp(codes[i].name, name))
			return codes[i].code;
	return 0;
}

void nv_log(const char *fmt, ...)
{
	va_list ap;

	fputs("mrc-nic verbs: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
