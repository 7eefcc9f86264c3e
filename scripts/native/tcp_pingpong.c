/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcp_pingpong: the kernel TCP peer of ib_write_lat in scripts/bench_verbs.py.
 * SIZE-byte messages bounced ITERS times over one TCP_NODELAY connection,
 * blocking reads; the client prints each one-way (round trip / 2, us), one a line.
 *
 *   tcp_pingpong server PORT ITERS SIZE | tcp_pingpong client ADDR PORT ITERS SIZE
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void exactly(int fd, char *buf, int n, int out)
{
	for (int at = 0; at < n;) {
		int r = out ? write(fd, buf + at, n - at) : read(fd, buf + at, n - at);

		if (r <= 0)
			exit(1);
		at += r;
	}
}

int main(int argc, char **argv)
{
	int server = argc == 5 && !strcmp(argv[1], "server"), one = 1, fd;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char buf[65536] = { 0 };

	if (!server && !(argc == 6 && !strcmp(argv[1], "client")))
		return 2;
	int iters = atoi(argv[server ? 3 : 4]), size = atoi(argv[server ? 4 : 5]);

	if (size < 1 || size > (int)sizeof(buf))
		return 2;
	sa.sin_port = htons(atoi(argv[server ? 2 : 3]));
	if (server) {
		int l = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1))
			return 1;
		fd = accept(l, NULL, NULL);
	} else {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		inet_pton(AF_INET, argv[2], &sa.sin_addr);
		for (int i = 0; i < 100 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)); i++)
			usleep(50000);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (int i = 0; i < iters; i++) {
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (server) {
			exactly(fd, buf, size, 0);
			exactly(fd, buf, size, 1);
			continue;
		}
		exactly(fd, buf, size, 1);
		exactly(fd, buf, size, 0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("%.3f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 2e3);
	}
	return 0;
}
