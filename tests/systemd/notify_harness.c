/* notify-harness: drives daemon/core/notify.c the way d9d's main loop does, so its
 * sd_notify and socket-activation behaviour can be tested on its own:
 * take the activated control socket, accept one client and answer it, send
 * READY, ping the watchdog from its timerfd N times, then send STOPPING. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/core/notify.h"

static int serve_one_client(int listen_fd)
{
        int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

        if (c < 0)
                return -errno;
        static const char hello[] = "notify-harness: activated\n";
        ssize_t n = write(c, hello, sizeof(hello) - 1);

        close(c);
        return n < 0 ? -errno : 0;
}

static int ping_watchdog(int pings)
{
        int tfd = d9d_notify_watchdog_timerfd();

        if (tfd < 0)
                return tfd;
        for (int i = 0; i < pings; i++) {
                struct pollfd p = { .fd = tfd, .events = POLLIN };
                uint64_t ticks;

                if (poll(&p, 1, 10000) != 1 || read(tfd, &ticks, sizeof(ticks)) != sizeof(ticks)) {
                        close(tfd);
                        return -ETIMEDOUT;
                }
                d9d_notify_watchdog();
        }
        close(tfd);
        return 0;
}

int main(int argc, char **argv)
{
        int pings = argc > 1 ? atoi(argv[1]) : 2;
        int fd = d9d_notify_listen_fd("control");

        printf("listen_fd=%d%s%s\n", fd, fd < 0 ? " " : "", fd < 0 ? strerror(-fd) : "");
        printf("LISTEN_FDS=%s\n", getenv("LISTEN_FDS") ? getenv("LISTEN_FDS") : "(unset)");
        if (fd >= 0) {
                int r = serve_one_client(fd);

                if (r < 0) {
                        fprintf(stderr, "notify-harness: accept: %s\n", strerror(-r));
                        return 1;
                }
        }
        d9d_notify_status("starting %d pings", pings);
        d9d_notify_status("%s", "first line only\nMAINPID=1"); /* must not inject MAINPID= */
        d9d_notify_ready("ready");
        printf("watchdog_usec=%llu\n", (unsigned long long)d9d_notify_watchdog_usec());
        int r = ping_watchdog(pings);

        if (r < 0 && r != -ENODATA) {
                fprintf(stderr, "notify-harness: watchdog: %s\n", strerror(-r));
                return 1;
        }
        d9d_notify_stopping("stopping");
        fflush(stdout);
        return 0;
}
