/*
 * pause: the sandbox process of every pod in the offline image set.
 *
 * Like Kubernetes' pause, it holds the pod's namespaces open, reaps the zombies that end up
 * re-parented to it (it is PID 1 when the pod shares its PID namespace), and exits cleanly on
 * SIGINT or SIGTERM. Built with `gcc -static -Os -s` by `cargo xtask images`.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "oneinfra-rs pause 1"

static void on_terminate(int sig) {
    /* Async-signal-safe: _exit, not exit. The exit status tells which signal ended us. */
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    int saved = errno;
    (void)sig;
    /* One SIGCHLD may stand for several children: reap until none is left. */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int install(int sig, void (*handler)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv) {
    int i;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--version") == 0) {
            printf("%s\n", VERSION);
            return 0;
        }
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not running as PID 1\n");
    }
    if (install(SIGINT, on_terminate, 0) < 0 || install(SIGTERM, on_terminate, 0) < 0 ||
        install(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
    /* Not reached: pause() only returns after a handler that does not exit. */
    return 42;
}
