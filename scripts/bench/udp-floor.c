/*
 * What the kernel alone costs a RoCEv2-over-UDP ping-pong (docs/benchmarks.md, issue 12): two
 * threads of one process ping-pong a 40-byte datagram (an 8-byte RDMA WRITE: BTH + RETH +
 * payload + ICRC) over 127.0.0.1, pinned to CPU 0, with the socket calls of the UDP reference
 * and then with those the soft provider must make, one change at a time. Prints the median
 * half round trip of each variant; compare the lines of one run only.
 *
 *   plain      recv / unconnected sendto                      (the reference's server side)
 *   connected  recv / send on connected sockets                (the reference's client side)
 *   opts       plain with the provider's socket options (below), UDP_GRO on
 *   noname     recvmsg without the source address, UDP_GRO on
 *   recvmsg    recvmsg with a source address, 64 KiB buffer, UDP_GRO on
 *   +tos       and IP_RECVTOS (the ECN bits: a control message per datagram)
 *   +timeout   and SO_RCVTIMEO (the provider's blocking receive returns to run timers)
 *   +ack       and every send a 2-segment UDP GSO send: the datagram and a 20-byte ACK
 *
 * All but plain/connected also set IP_MTU_DISCOVER=IP_PMTUDISC_DO, IP_TTL and IP_TOS as the
 * provider does. opts and noname each leave out one thing of the step after them (recvmsg):
 * the call form and the source address. The provider cannot use connected sockets: Linux
 * numbers the IPv4 ID of a connected socket's datagrams from a random per-socket start
 * (ip_select_ident_segs), and the ICRC covers the ID.
 *
 * Build and run: cc -O2 -pthread -o /tmp/udp-floor scripts/bench/udp-floor.c && /tmp/udp-floor
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum { N = 20000, LEN = 40, ACK = 20 };
struct variant { const char *name; int connected, recvmsg, opts, tos, timeout, ack, noname; };
static const struct variant variants[] = {
	{"plain", 0, 0, 0, 0, 0, 0, 0},     {"connected", 1, 0, 0, 0, 0, 0, 0},
	{"opts", 0, 0, 1, 0, 0, 0, 0},      {"noname", 0, 1, 1, 0, 0, 0, 1},
	{"recvmsg", 0, 1, 1, 0, 0, 0, 0},   {"+tos", 0, 1, 1, 1, 0, 0, 0},
	{"+timeout", 0, 1, 1, 1, 1, 0, 0},  {"+ack", 0, 1, 1, 1, 1, 1, 0},
};
static const struct variant *v;
static int sa, sb;
static struct sockaddr_in aa, ab;

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int open_socket(struct sockaddr_in *a)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 16 << 20;
	memset(a, 0, sizeof *a);
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
	if (v->opts) {
		int pmtu = IP_PMTUDISC_DO, ttl = 64, tos = 2;
		setsockopt(s, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
		setsockopt(s, IPPROTO_IP, IP_TTL, &ttl, sizeof ttl);
		setsockopt(s, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
		setsockopt(s, IPPROTO_UDP, UDP_GRO, &one, sizeof one);
	}
	if (v->tos)
		setsockopt(s, IPPROTO_IP, IP_RECVTOS, &one, sizeof one);
	if (v->timeout) {
		struct timeval tv = {0, 500};
		setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	}
	socklen_t l = sizeof *a;
	bind(s, (struct sockaddr *)a, sizeof *a);
	getsockname(s, (struct sockaddr *)a, &l);
	return s;
}

static void send_one(int s, struct sockaddr_in *to, char *b)
{
	if (v->ack) {
		char c[CMSG_SPACE(sizeof(unsigned short))] = {0};
		struct iovec io = {b, LEN + ACK};
		struct msghdr m = {to, sizeof *to, &io, 1, c, sizeof c, 0};
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = IPPROTO_UDP;
		h->cmsg_type = UDP_SEGMENT;
		h->cmsg_len = CMSG_LEN(sizeof(unsigned short));
		*(unsigned short *)CMSG_DATA(h) = LEN;
		sendmsg(s, &m, 0);
	} else if (v->connected) {
		send(s, b, LEN, 0);
	} else {
		sendto(s, b, LEN, 0, (struct sockaddr *)to, sizeof *to);
	}
}

static void recv_one(int s, char *b)
{
	if (v->recvmsg) {
		char c[256];
		struct sockaddr_in from;
		struct iovec io = {b, 65536};
		struct msghdr m = {v->noname ? NULL : &from, v->noname ? 0 : sizeof from, &io, 1, c, sizeof c, 0};
		while (recvmsg(s, &m, 0) < 0)
			;
	} else {
		while (recv(s, b, 65536, 0) < 0)
			;
	}
}

static void *peer(void *unused)
{
	static char b[65536];
	(void)unused;
	for (int i = 0; i < N; i++) {
		recv_one(sb, b);
		send_one(sb, &aa, b);
	}
	return NULL;
}

static int cmp(const void *x, const void *y)
{
	double d = *(const double *)x - *(const double *)y;
	return (d > 0) - (d < 0);
}

int main(void)
{
	static char b[65536];
	static double t[N];
	cpu_set_t cpus;
	CPU_ZERO(&cpus);
	CPU_SET(0, &cpus);
	sched_setaffinity(0, sizeof cpus, &cpus);
	for (size_t k = 0; k < sizeof variants / sizeof *variants; k++) {
		v = &variants[k];
		sa = open_socket(&aa);
		sb = open_socket(&ab);
		if (v->connected) {
			connect(sa, (struct sockaddr *)&ab, sizeof ab);
			connect(sb, (struct sockaddr *)&aa, sizeof aa);
		}
		pthread_t th;
		pthread_create(&th, NULL, peer, NULL);
		for (int i = 0; i < N; i++) {
			double t0 = now_us();
			send_one(sa, &ab, b);
			recv_one(sa, b);
			t[i] = (now_us() - t0) / 2;
		}
		pthread_join(th, NULL);
		qsort(t, N, sizeof *t, cmp);
		printf("%-10s median half round trip %.2f us\n", v->name, t[N / 2]);
	}
	return 0;
}
