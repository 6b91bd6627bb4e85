/*
 * dnsload: asks a DNS server at a fixed rate for a bounded time and says
 * which queries were lost and how long the longest stretch without answers
 * was. Built static (gcc -O2 -static) so it runs in the busybox client image.
 *
 *   dnsload -s 10.96.0.10 -r 200 -d 60 [-t 1000] [-p 53] [-f] name [name ...]
 *
 * Queries go out evenly spaced (rate per second), type A, names in turn, each
 * from one of 16 UDP sockets in turn (a resolver uses a fresh port per
 * lookup; 16 keep conntrack entries few but not one). With -f each query has
 * a socket of its own, opened and connect()ed just before it is sent and
 * closed once answered or timed out, as glibc's stub resolver does per
 * lookup: where the connect picks the backend (Cilium's socket load
 * balancing), every query is balanced anew. A query unanswered
 * after the timeout (-t, ms) is lost. Every second a line
 *   t=12 sent=200 answered=200 servfail=0
 * and at the end one summary line
 *   summary sent=N answered=N lost=N servfail=N longest_gap_ms=N first_lost_ms=N last_lost_ms=N
 * where longest_gap_ms is the longest time between the sending of two
 * queries that were answered with every query sent between them lost: how
 * long a client saw no answer. Exits 0 whatever was lost (the caller judges).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dnsquery.h"

#define SOCKETS 16
#define MAX_QUERIES (1 << 22)
#define MAX_FRESH 8192 /* -f: sockets open at once (rate x timeout) */

struct query {
	uint64_t sent_us;
	int64_t answered_us; /* -1 while waiting */
	uint8_t rcode;
};

static struct query *queries;
static uint32_t *by_id[SOCKETS]; /* id -> query index + 1, per socket */
/* -f: the one query of each socket slot (index + 1, 0: none) and its id */
static uint32_t *slot_query;
static uint16_t *slot_id;

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void usage(void)
{
	fprintf(stderr, "usage: dnsload -s SERVER -r RATE -d SECONDS [-t TIMEOUT_MS] [-p PORT] [-f] NAME...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *server = NULL;
	long rate = 0, seconds = 0, timeout_ms = 1000, port = 53;
	int opt, fresh = 0;
	while ((opt = getopt(argc, argv, "s:r:d:t:p:f")) != -1) {
		switch (opt) {
		case 's': server = optarg; break;
		case 'r': rate = atol(optarg); break;
		case 'd': seconds = atol(optarg); break;
		case 't': timeout_ms = atol(optarg); break;
		case 'p': port = atol(optarg); break;
		case 'f': fresh = 1; break;
		default: usage();
		}
	}
	if (!server || rate <= 0 || seconds <= 0 || optind >= argc || rate * seconds > MAX_QUERIES)
		usage();
	char **names = argv + optind;
	int name_count = argc - optind;

	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (inet_pton(AF_INET, server, &addr.sin_addr) != 1)
		usage();
	/* -f: enough slots that a slot comes round again only after its query timed out */
	int nsock = SOCKETS;
	if (fresh) {
		nsock = (int)(rate * timeout_ms / 1000 + rate / 10 + 2);
		if (nsock > MAX_FRESH)
			usage();
		slot_query = calloc(nsock, sizeof *slot_query);
		slot_id = calloc(nsock, sizeof *slot_id);
	}
	int *fds = calloc(nsock, sizeof *fds);
	struct pollfd *pfds = calloc(nsock, sizeof *pfds);
	for (int i = 0; i < nsock; i++) {
		pfds[i].events = POLLIN;
		if (fresh) {
			fds[i] = pfds[i].fd = -1;
			continue;
		}
		fds[i] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
		if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&addr, sizeof addr) < 0) {
			perror("socket");
			return 1;
		}
		pfds[i].fd = fds[i];
		by_id[i] = calloc(65536, sizeof(uint32_t));
	}
	long total = rate * seconds;
	queries = calloc(total, sizeof *queries);
	srand(getpid() ^ now_us());

	uint64_t start = now_us();
	uint64_t interval = 1000000 / rate;
	uint64_t end = start + seconds * 1000000 + timeout_ms * 1000;
	long sent = 0, report_sec = 1;
	long sec_sent = 0, sec_answered = 0, sec_servfail = 0;
	uint8_t buf[1500];

	for (;;) {
		uint64_t t = now_us();
		while (sent < total && start + sent * interval <= t) {
			int s = sent % nsock;
			uint16_t id = rand() & 0xffff;
			size_t len = encode_query(buf, id, names[sent % name_count], 1 /* A */);
			queries[sent].sent_us = t;
			queries[sent].answered_us = -1;
			if (fresh) {
				/* The slot's previous query is answered or timed out by now. */
				if (fds[s] >= 0)
					close(fds[s]);
				fds[s] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
				if (fds[s] >= 0 && connect(fds[s], (struct sockaddr *)&addr, sizeof addr) < 0) {
					/* No backend (refused): the query is lost. */
					close(fds[s]);
					fds[s] = -1;
				}
				pfds[s].fd = fds[s];
				slot_query[s] = sent + 1;
				slot_id[s] = id;
			} else {
				by_id[s][id] = sent + 1;
			}
			if (fds[s] >= 0 && send(fds[s], buf, len, 0) < 0 && errno != ECONNREFUSED && errno != EAGAIN)
				perror("send");
			sent++;
			sec_sent++;
		}
		if (t >= start + report_sec * 1000000) {
			printf("t=%ld sent=%ld answered=%ld servfail=%ld\n", report_sec, sec_sent, sec_answered, sec_servfail);
			fflush(stdout);
			sec_sent = sec_answered = sec_servfail = 0;
			report_sec++;
		}
		if (t >= end)
			break;
		uint64_t next = sent < total ? start + sent * interval : end;
		int wait_ms = next > t ? (int)((next - t + 999) / 1000) : 0;
		if (wait_ms > 50)
			wait_ms = 50;
		if (poll(pfds, nsock, wait_ms) <= 0)
			continue;
		t = now_us();
		for (int s = 0; s < nsock; s++) {
			if (!(pfds[s].revents & POLLIN))
				continue;
			for (;;) {
				ssize_t n = recv(fds[s], buf, sizeof buf, 0);
				if (n < 0)
					break;
				if (n < 12)
					continue;
				uint16_t id = (buf[0] << 8) | buf[1];
				uint32_t idx;
				if (fresh) {
					idx = slot_id[s] == id ? slot_query[s] : 0;
					if (idx)
						slot_query[s] = 0;
				} else {
					idx = by_id[s][id];
					by_id[s][id] = 0;
				}
				if (!idx)
					continue;
				struct query *q = &queries[idx - 1];
				if (q->answered_us >= 0 || t - q->sent_us > (uint64_t)timeout_ms * 1000)
					continue;
				q->answered_us = t;
				q->rcode = buf[3] & 0x0f;
				sec_answered++;
				if (q->rcode == 2)
					sec_servfail++;
			}
		}
	}

	long answered = 0, lost = 0, servfail = 0;
	/* The start counts as an answer: losses from the first query on are a gap too. */
	int64_t first_lost = -1, last_lost = -1, gap = 0, last_ok = 0;
	for (long i = 0; i < total; i++) {
		int64_t at = (int64_t)(queries[i].sent_us - start);
		if (queries[i].answered_us >= 0) {
			answered++;
			if (queries[i].rcode == 2)
				servfail++;
			if (at - last_ok > gap)
				gap = at - last_ok;
			last_ok = at;
		} else {
			lost++;
			if (first_lost < 0)
				first_lost = at;
			last_lost = at;
		}
	}
	/* Lost at the very end with nothing answered after: a gap to the end. */
	if (total > 0 && queries[total - 1].answered_us < 0) {
		int64_t at = (int64_t)(queries[total - 1].sent_us - start);
		if (at - last_ok > gap)
			gap = at - last_ok;
	}
	printf("summary sent=%ld answered=%ld lost=%ld servfail=%ld longest_gap_ms=%lld first_lost_ms=%lld last_lost_ms=%lld\n",
	       total, answered, lost, servfail, (long long)(gap / 1000),
	       (long long)(first_lost < 0 ? -1 : first_lost / 1000),
	       (long long)(last_lost < 0 ? -1 : last_lost / 1000));
	return 0;
}
