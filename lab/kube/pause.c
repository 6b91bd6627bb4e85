/* The pod sandbox's process: holds the namespaces, reaps orphans, exits on TERM/INT. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
  signal(SIGINT, quit);
  signal(SIGTERM, quit);
  signal(SIGCHLD, reap);
  for (;;) pause();
}
