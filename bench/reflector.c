/*
 * The kernel ceiling for the benchmark: a UDP "server" that does no DNS work.
 * It echoes every datagram back to its sender with the QR bit set, so dnsperf
 * counts it as an answer (NOERROR, same ID, same question). One thread,
 * recvmmsg/sendmmsg in batches of up to BATCH datagrams: the cost left is the
 * socket layer's, which every real server pays too.
 *
 *   gcc -O2 -o reflector bench/reflector.c
 *   ./reflector 127.77.1.53 53
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
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 64
#define BUFSZ 1500

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s IPV4 PORT\n", argv[0]);
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
        fprintf(stderr, "reflector: bad address %s\n", argv[1]);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); return 1; }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { perror("bind"); return 1; }

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
            if (errno == EINTR) continue;
            perror("recvmmsg");
            return 1;
        }
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (msgs[i].msg_len < 12) continue;      /* not even a DNS header */
            bufs[i][2] |= (char)0x80;                /* QR: this is a response */
            iov[i].iov_len = msgs[i].msg_len;
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
