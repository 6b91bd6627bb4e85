/* getaddrinfo(NAME) with musl's resolver: prints the sorted addresses, one
 * line, or "NOTFOUND" / "ERR <message>". Built with musl-gcc -static. */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s NAME\n", argv[0]); return 64; }
    struct addrinfo hints, *res, *ai;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(argv[1], NULL, &hints, &res);
    if (rc == EAI_NONAME || rc == EAI_NODATA) { puts("NOTFOUND"); return 2; }
    if (rc) { printf("ERR %s\n", gai_strerror(rc)); return 1; }
    char *addrs[64]; int n = 0;
    for (ai = res; ai && n < 64; ai = ai->ai_next) {
        char buf[INET6_ADDRSTRLEN];
        const void *p = ai->ai_family == AF_INET ? (void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                                                 : (void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
        inet_ntop(ai->ai_family, p, buf, sizeof buf);
        int dup = 0;
        for (int i = 0; i < n; i++) if (!strcmp(addrs[i], buf)) dup = 1;
        if (!dup) addrs[n++] = strdup(buf);
    }
    qsort(addrs, n, sizeof *addrs, cmp);
    for (int i = 0; i < n; i++) printf("%s%s", i ? " " : "", addrs[i]);
    putchar('\n');
    freeaddrinfo(res);
    return 0;
}
