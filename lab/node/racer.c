/* The conntrack race of the AKS field reports: N lookups of www.lab.test, each
 * from a new connected UDP socket (a new source port, as a resolver uses), its A
 * and AAAA queries sent by two threads at the same instant (as glibc's parallel
 * A/AAAA can be when two threads of an application resolve at once).
 *
 *   racer N SERVER   prints the lookups that missed an answer within 1 s
 */
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static pthread_barrier_t ready;
static int fd = -1;
static uint64_t release_ns;
static unsigned char queries[2][64];
static size_t query_len;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static size_t build(unsigned char *out, uint16_t id, uint16_t qtype) {
    static const unsigned char name[] = "\3www\3lab\4test";
    unsigned char header[12] = {id >> 8, id & 0xff, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    size_t n = 0;
    memcpy(out, header, 12), n = 12;
    memcpy(out + n, name, sizeof name), n += sizeof name; /* with the root's 0 */
    out[n++] = qtype >> 8, out[n++] = qtype & 0xff, out[n++] = 0, out[n++] = 1;
    return n;
}

/* Waits at the barrier, spins to the shared release instant, sends its query. */
static void *sender(void *arg) {
    long which = (long)arg;
    for (;;) {
        pthread_barrier_wait(&ready);
        if (fd < 0) return NULL;
        while (now_ns() < release_ns) {
        }
        send(fd, queries[which], query_len, 0);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: racer N SERVER\n");
        return 2;
    }
    long n = atol(argv[1]);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(53)};
    if (inet_pton(AF_INET, argv[2], &to.sin_addr) != 1) return 2;
    pthread_barrier_init(&ready, NULL, 3);
    pthread_t threads[2];
    for (long i = 0; i < 2; i++) pthread_create(&threads[i], NULL, sender, (void *)i);
    long unanswered = 0;
    for (long i = 0; i < n; i++) {
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&to, sizeof to) != 0) return 1;
        query_len = build(queries[0], (uint16_t)(2 * i), 1);
        build(queries[1], (uint16_t)(2 * i + 1), 28);
        fd = s;
        release_ns = now_ns() + 200000; /* both threads are awake by then */
        pthread_barrier_wait(&ready);
        int answers = 0;
        uint64_t deadline = now_ns() + 1000000000u;
        while (answers < 2) {
            uint64_t t = now_ns();
            if (t >= deadline) break;
            struct pollfd p = {.fd = s, .events = POLLIN};
            if (poll(&p, 1, (int)((deadline - t) / 1000000u) + 1) <= 0) break;
            unsigned char buf[1500];
            if (recv(s, buf, sizeof buf, 0) > 0) answers++;
        }
        if (answers < 2) unanswered++;
        close(s);
    }
    fd = -1;
    pthread_barrier_wait(&ready);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    printf("%ld\n", unanswered);
    return 0;
}
