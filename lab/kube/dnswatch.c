/*
 * dnswatch: asks the same questions of several DNS servers at a fixed
 * interval for a bounded time and prints every answer, for the
 * follow-api lab (lab/kube/follow-api). Built static (gcc -O2 -static) so it
 * runs in the busybox client image.
 *
 *   dnswatch -d SECONDS [-i MS] [-k K] -s LABEL=IP[:PORT] [-s ...]
 *            -q NAME/TYPE [-q ...] [NAME ...]
 *
 * Every interval (-i, default 100 ms) each server (-s, up to 8) is asked, over
 * UDP with RD set, every -q question (TYPE: A, SRV or PTR) and K (-k,
 * default 2) of the trailing NAMEs (type A) in turn, so each trailing name
 * comes round once every (number of NAMEs / K) intervals. Each server has its
 * own socket; the answers of one tick are waited for until the next tick at
 * most, then the unanswered ones are TIMEOUT. One line per question and tick:
 *
 *   TIME_MS LABEL NAME TYPE RCODE DATA
 *
 * TIME_MS is CLOCK_REALTIME in milliseconds when the answer arrived (for a
 * TIMEOUT, when the wait ended): a pod shares the node's clock, so it
 * compares with times taken on the node. RCODE is NOERROR, NXDOMAIN,
 * SERVFAIL, ..., or TIMEOUT. DATA is the answer section's records of the
 * asked type, sorted and joined with commas (A: the address; SRV: PORT:TARGET;
 * PTR: the target), or "-" when there are none. CNAMEs and other types are
 * left out. Stops after SECONDS (-d); exits 0 whatever was answered.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dnsquery.h"

#define MAX_SERVERS 8
#define MAX_QUESTIONS 32 /* per server and tick */
#define MAX_RECORDS 64

struct question {
	const char *name;
	const char *type_name;
	uint16_t type;
};

struct server {
	const char *label;
	int fd;
};

static uint64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long long real_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void usage(void)
{
	fprintf(stderr, "usage: dnswatch -d SECONDS [-i MS] [-k K] -s LABEL=IP[:PORT]... "
			"-q NAME/TYPE... [NAME...]\n");
	exit(2);
}

static uint16_t type_code(const char *t)
{
	if (!strcmp(t, "A"))
		return 1;
	if (!strcmp(t, "PTR"))
		return 12;
	if (!strcmp(t, "SRV"))
		return 33;
	usage();
	return 0;
}

/* Reads the (possibly compressed) name at *off into out (dotted, with the
 * final dot); moves *off past it. Returns -1 on a malformed name. */
static int read_name(const uint8_t *m, size_t len, size_t *off, char *out, size_t cap)
{
	size_t p = *off, o = 0;
	int jumped = 0, hops = 0;
	for (;;) {
		if (p >= len || hops > 32)
			return -1;
		uint8_t l = m[p];
		if ((l & 0xc0) == 0xc0) {
			if (p + 1 >= len)
				return -1;
			if (!jumped)
				*off = p + 2;
			p = ((l & 0x3f) << 8) | m[p + 1];
			jumped = 1;
			hops++;
			continue;
		}
		if (l == 0) {
			if (!jumped)
				*off = p + 1;
			if (o == 0 && cap > 1)
				out[o++] = '.';
			out[o] = 0;
			return 0;
		}
		if (p + 1 + l > len || o + l + 2 > cap)
			return -1;
		memcpy(out + o, m + p + 1, l);
		o += l;
		out[o++] = '.';
		p += 1 + l;
	}
}

/* Whether the answer's question is q's (an earlier tick's late answer whose
 * ID happens to fall in this tick's range is not). */
static int question_matches(const uint8_t *m, size_t len, const struct question *q)
{
	char name[300];
	size_t off = 12;
	if (((m[4] << 8) | m[5]) != 1 || read_name(m, len, &off, name, sizeof name) < 0 || off + 4 > len)
		return 0;
	size_t n = strlen(q->name);
	if (q->name[n - 1] != '.')
		n++; /* the final dot read_name adds */
	return strlen(name) == n && !strncasecmp(name, q->name, strlen(q->name)) &&
	       ((m[off] << 8) | m[off + 1]) == q->type;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *rcode_name(int rcode)
{
	static const char *names[] = {"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"};
	static char other[16];
	if (rcode < 6)
		return names[rcode];
	snprintf(other, sizeof other, "RCODE%d", rcode);
	return other;
}

/* Prints the line of one answer. */
static void print_answer(long long at, const char *label, const struct question *q,
			 const uint8_t *m, size_t len)
{
	static char store[MAX_RECORDS][300];
	char *recs[MAX_RECORDS];
	int nrec = 0;
	int rcode = m[3] & 0x0f;
	size_t off = 12;
	int qd = (m[4] << 8) | m[5], an = (m[6] << 8) | m[7];
	char name[300];
	int bad = 0;
	for (int i = 0; i < qd && !bad; i++) {
		if (read_name(m, len, &off, name, sizeof name) < 0 || off + 4 > len)
			bad = 1;
		off += 4;
	}
	for (int i = 0; i < an && !bad; i++) {
		if (read_name(m, len, &off, name, sizeof name) < 0 || off + 10 > len) {
			bad = 1;
			break;
		}
		uint16_t type = (m[off] << 8) | m[off + 1];
		uint16_t rdlen = (m[off + 8] << 8) | m[off + 9];
		off += 10;
		if (off + rdlen > len) {
			bad = 1;
			break;
		}
		size_t rd = off;
		off += rdlen;
		if (type != q->type || nrec >= MAX_RECORDS)
			continue;
		char *s = store[nrec];
		if (type == 1 && rdlen == 4) {
			inet_ntop(AF_INET, m + rd, s, 300);
		} else if (type == 33 && rdlen > 6) {
			size_t t = rd + 6;
			char target[280];
			if (read_name(m, len, &t, target, sizeof target) < 0)
				continue;
			snprintf(s, 300, "%u:%s", (m[rd + 4] << 8) | m[rd + 5], target);
		} else if (type == 12) {
			size_t t = rd;
			if (read_name(m, len, &t, s, 300) < 0)
				continue;
		} else {
			continue;
		}
		recs[nrec++] = s;
	}
	qsort(recs, nrec, sizeof *recs, cmp_str);
	printf("%lld %s %s %s %s ", at, label, q->name, q->type_name, bad ? "MALFORMED" : rcode_name(rcode));
	if (nrec == 0)
		fputs("-", stdout);
	for (int i = 0; i < nrec; i++)
		printf("%s%s", i ? "," : "", recs[i]);
	putchar('\n');
}

int main(int argc, char **argv)
{
	struct server servers[MAX_SERVERS];
	struct question fixed[MAX_QUESTIONS];
	int nserv = 0, nfixed = 0, opt;
	long seconds = 0, interval_ms = 100, k = 2;
	while ((opt = getopt(argc, argv, "d:i:k:s:q:")) != -1) {
		switch (opt) {
		case 'd': seconds = atol(optarg); break;
		case 'i': interval_ms = atol(optarg); break;
		case 'k': k = atol(optarg); break;
		case 's': {
			if (nserv >= MAX_SERVERS)
				usage();
			char *eq = strchr(optarg, '=');
			if (!eq)
				usage();
			*eq = 0;
			char *host = eq + 1, *colon = strchr(host, ':');
			struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(53)};
			if (colon) {
				*colon = 0;
				addr.sin_port = htons(atoi(colon + 1));
			}
			if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
				usage();
			int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
			if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
				perror("socket");
				return 1;
			}
			servers[nserv].label = optarg;
			servers[nserv++].fd = fd;
			break;
		}
		case 'q': {
			char *slash = strrchr(optarg, '/');
			if (!slash || nfixed >= MAX_QUESTIONS)
				usage();
			*slash = 0;
			fixed[nfixed].name = optarg;
			fixed[nfixed].type_name = slash + 1;
			fixed[nfixed].type = type_code(slash + 1);
			nfixed++;
			break;
		}
		default: usage();
		}
	}
	char **rot = argv + optind;
	int nrot = argc - optind;
	if (nrot == 0)
		k = 0;
	if (seconds <= 0 || interval_ms <= 0 || nserv == 0 || k < 0 || nfixed + k > MAX_QUESTIONS ||
	    nfixed + k == 0)
		usage();
	srand(getpid() ^ (unsigned)mono_us());

	uint64_t start = mono_us(), end = start + (uint64_t)seconds * 1000000;
	uint8_t buf[1500];
	struct pollfd pfds[MAX_SERVERS];
	for (long tick = 0;; tick++) {
		uint64_t tick_start = start + (uint64_t)tick * interval_ms * 1000;
		if (tick_start >= end)
			break;
		uint64_t now = mono_us();
		if (tick_start > now)
			usleep(tick_start - now);
		/* This tick's questions: the fixed ones, then K rotating names. */
		struct question qs[MAX_QUESTIONS];
		int nq = 0;
		for (int i = 0; i < nfixed; i++)
			qs[nq++] = fixed[i];
		for (long i = 0; i < k; i++)
			qs[nq++] = (struct question){rot[(tick * k + i) % nrot], "A", 1};
		uint16_t base = rand() & 0xffff;
		int pending[MAX_SERVERS][MAX_QUESTIONS];
		int left = 0;
		for (int s = 0; s < nserv; s++) {
			for (int i = 0; i < nq; i++) {
				size_t len = encode_query(buf, (uint16_t)(base + i), qs[i].name, qs[i].type);
				pending[s][i] = send(servers[s].fd, buf, len, 0) == (ssize_t)len;
				if (!pending[s][i])
					printf("%lld %s %s %s TIMEOUT -\n", real_ms(), servers[s].label, qs[i].name,
					       qs[i].type_name);
				left += pending[s][i];
			}
			pfds[s].fd = servers[s].fd;
			pfds[s].events = POLLIN;
		}
		/* Answers until the next tick at most. */
		uint64_t deadline = tick_start + (uint64_t)interval_ms * 1000;
		while (left > 0) {
			now = mono_us();
			if (now >= deadline)
				break;
			int wait_ms = (int)((deadline - now + 999) / 1000);
			if (poll(pfds, nserv, wait_ms) <= 0)
				continue;
			long long at = real_ms();
			for (int s = 0; s < nserv; s++) {
				if (!(pfds[s].revents & POLLIN))
					continue;
				ssize_t n;
				while ((n = recv(servers[s].fd, buf, sizeof buf, 0)) >= 0) {
					if (n < 12 || !(buf[2] & 0x80))
						continue;
					uint16_t i = (uint16_t)(((buf[0] << 8) | buf[1]) - base);
					if (i >= nq || !pending[s][i] || !question_matches(buf, n, &qs[i]))
						continue; /* a late answer of an earlier tick */
					pending[s][i] = 0;
					left--;
					print_answer(at, servers[s].label, &qs[i], buf, n);
				}
			}
		}
		long long at = real_ms();
		for (int s = 0; s < nserv; s++)
			for (int i = 0; i < nq; i++)
				if (pending[s][i])
					printf("%lld %s %s %s TIMEOUT -\n", at, servers[s].label, qs[i].name,
					       qs[i].type_name);
		fflush(stdout);
	}
	return 0;
}
