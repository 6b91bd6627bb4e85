/*
 * The kernel ceiling for the benchmark: a UDP "server" that does no DNS work.
 * It echoes every datagram back to its sender with the QR bit set, so dnsperf
 * counts it as an answer (NOERROR, same ID, same question). One thread,
 * recvmmsg/sendmmsg in batches of up to BATCH datagrams: the cost left is the
 * socket layer's, which every real server pays too.
 *
 *   gcc -O2 -o reflector bench/reflector.c
 *   ./reflector 127.77.1.53 53
 *   ./reflector 127.77.1.53 53 answer   # an A record for every question instead
 *
 * With "answer" each reply is the question with one A record (192.0.2.1, TTL
 * 3600) and nothing else (no OPT): a cache stores it, as it stores a real
 * answer, so a miss does all a real one does (bench/instructions).
 *
 * What a server's socket setup costs the kernel per datagram can be measured
 * beside the plain reflector (bench/alternate reflector reflector+epoll ...), with
 * these set in the environment (any value):
 *
 *   REFLECTOR_EPOLL      the socket in an epoll set nobody waits on (as a socket
 *                        registered with an event loop is)
 *   REFLECTOR_REUSEPORT  SO_REUSEPORT (a group of one)
 *   REFLECTOR_SELECTOR   "random": the group's classic BPF program picks a socket
 *                        at random among 1 (A = random; A %= 1; return A);
 *                        "zero": return 0 (both as listen/reuseport.rs)
 *   REFLECTOR_TIMEOUT    a 100 ms read timeout (SO_RCVTIMEO), as a worker that
 *                        must look up now and then while idle sets
 *   REFLECTOR_THREAD     a second thread that only sleeps: the process is
 *                        multi-threaded, so each system call on the socket
 *                        takes a reference on it (fdget)
 *
 * Runs until SIGTERM or SIGINT.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <sys/epoll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define BATCH 64
#define BUFSZ 1500

static volatile sig_atomic_t stop;

/* Rewrites the query in buf (len bytes, QR already set) into an answer: the
 * question, then one A record pointing at it. Returns the new length, or -1
 * for a query without one whole question. */
static int with_answer(unsigned char *buf, int len) {
    if (buf[4] != 0 || buf[5] != 1) return -1;   /* QDCOUNT 1 */
    int at = 12;
    while (at < len && buf[at] != 0) {
        if (buf[at] > 63) return -1;             /* no pointers in a question */
        at += buf[at] + 1;
    }
    at += 1 + 4;                                 /* root label, type, class */
    if (at > len || at + 16 > BUFSZ) return -1;
    static const unsigned char record[16] = {
        0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2, 1,
    };
    memcpy(buf + at, record, sizeof record);
    buf[3] = (unsigned char)(0x80 | (buf[3] & 0x70)); /* RA, NOERROR */
    buf[6] = 0; buf[7] = 1;                      /* ANCOUNT 1 */
    buf[8] = buf[9] = buf[10] = buf[11] = 0;     /* NSCOUNT, ARCOUNT 0 */
    return at + (int)sizeof record;
}
static void on_signal(int sig) { (void)sig; stop = 1; }
static void *sleeper(void *arg) { (void)arg; for (;;) pause(); return NULL; }

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "answer") == 0)) {
        fprintf(stderr, "usage: %s IPV4 PORT [answer]\n", argv[0]);
        return 2;
    }
    int answer = argc == 4;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
        fprintf(stderr, "reflector: bad address %s\n", argv[1]);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); return 1; }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (getenv("REFLECTOR_REUSEPORT"))
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { perror("bind"); return 1; }
    const char *selector = getenv("REFLECTOR_SELECTOR");
    if (selector) {
        struct sock_filter random[] = {
            {BPF_LD | BPF_W | BPF_ABS, 0, 0, (unsigned)(SKF_AD_OFF + SKF_AD_RANDOM)},
            {BPF_ALU | BPF_MOD | BPF_K, 0, 0, 1},
            {BPF_RET | BPF_A, 0, 0, 0},
        };
        struct sock_filter zero[] = {{BPF_RET | BPF_K, 0, 0, 0}};
        int is_zero = strcmp(selector, "zero") == 0;
        struct sock_fprog prog = {is_zero ? 1 : 3, is_zero ? zero : random};
        if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) < 0) {
            perror("SO_ATTACH_REUSEPORT_CBPF");
            return 1;
        }
    }
    if (getenv("REFLECTOR_EPOLL")) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET};
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) { perror("epoll"); return 1; }
    }

    if (getenv("REFLECTOR_TIMEOUT")) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
        if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) { perror("SO_RCVTIMEO"); return 1; }
    }
    if (getenv("REFLECTOR_THREAD")) {
        pthread_t t;
        if (pthread_create(&t, NULL, sleeper, NULL) != 0) { perror("pthread_create"); return 1; }
    }

    /* No SA_RESTART: a signal interrupts the blocking recvmmsg. */
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    static char bufs[BATCH][BUFSZ];
    static struct sockaddr_in peers[BATCH];
    static struct iovec iov[BATCH];
    static struct mmsghdr msgs[BATCH];
    unsigned long long echoed = 0;

    while (!stop) {
        for (int i = 0; i < BATCH; i++) {
            iov[i].iov_base = bufs[i];
            iov[i].iov_len = BUFSZ;
            msgs[i].msg_hdr = (struct msghdr){
                .msg_name = &peers[i], .msg_namelen = sizeof peers[i],
                .msg_iov = &iov[i], .msg_iovlen = 1,
            };
            msgs[i].msg_len = 0;
        }
        /* Block for the first datagram, then take whatever else is queued. */
        int n = recvmmsg(fd, msgs, BATCH, MSG_WAITFORONE, NULL);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            perror("recvmmsg");
            return 1;
        }
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (msgs[i].msg_len < 12) continue;      /* not even a DNS header */
            bufs[i][2] |= (char)0x80;                /* QR: this is a response */
            iov[i].iov_len = msgs[i].msg_len;
            if (answer) {
                int len = with_answer((unsigned char *)bufs[i], (int)msgs[i].msg_len);
                if (len < 0) continue;
                iov[i].iov_len = (size_t)len;
            }
            if (k != i) {                            /* compact the batch */
                msgs[k] = msgs[i];
            }
            k++;
        }
        int off = 0;
        while (off < k) {
            int m = sendmmsg(fd, msgs + off, (unsigned)(k - off), 0);
            if (m < 0) {
                if (errno == EINTR) { if (stop) break; continue; }
                break;                               /* drop the rest, like a full socket would */
            }
            off += m;
        }
        echoed += (unsigned long long)off;
    }
    fprintf(stderr, "reflector: echoed %llu datagrams\n", echoed);
    close(fd);
    return 0;
}
