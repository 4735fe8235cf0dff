/* notify: sd_notify state changes, the watchdog timer and the socket-activated
 * control socket. See notify.h for the contract. */
#include "daemon/core/cleanup.h"
#include "daemon/core/notify.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

/* sd_notify() returns 0 when NOTIFY_SOCKET is unset, > 0 when sent. We keep
 * the environment (unset_environment = 0) because we notify many times. */
static int notify_send(const char *msg)
{
        int r = sd_notify(0, msg);

        return r < 0 ? r : 0;
}

/* "<state>\nSTATUS=<first line of status>": STATUS= is one line, and a
 * newline in it would start a bogus assignment. */
static int notify_with_status(const char *state, const char *status)
{
        if (!status)
                return notify_send(state);

        int r = sd_notifyf(0, "%s\nSTATUS=%.*s", state, (int)strcspn(status, "\n"), status);

        return r < 0 ? r : 0;
}

int d9d_notify_ready(const char *status)
{
        return notify_with_status("READY=1", status);
}

int d9d_notify_status(const char *fmt, ...)
{
        char line[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        line[strcspn(line, "\n")] = '\0';

        int r = sd_notifyf(0, "STATUS=%s", line);

        return r < 0 ? r : 0;
}

int d9d_notify_watchdog(void)
{
        return notify_send("WATCHDOG=1");
}

int d9d_notify_stopping(const char *status)
{
        return notify_with_status("STOPPING=1", status);
}

uint64_t d9d_notify_watchdog_usec(void)
{
        uint64_t usec = 0;

        /* > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID (if any) is us. */
        if (sd_watchdog_enabled(0, &usec) <= 0)
                return 0;
        return usec;
}

int d9d_notify_watchdog_timerfd(void)
{
        uint64_t usec = d9d_notify_watchdog_usec();

        if (usec == 0)
                return -ENODATA;

        /* Half the interval, as sd_watchdog_enabled(3) recommends: one late
         * tick must not be enough to get us killed. */
        uint64_t half = usec / 2 ? usec / 2 : 1;
        struct itimerspec its = {
                .it_interval = { .tv_sec = half / 1000000, .tv_nsec = (half % 1000000) * 1000 },
        };
        its.it_value = its.it_interval;

        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

        if (fd < 0)
                return -errno;
        if (timerfd_settime(fd, 0, &its, NULL) < 0) {
                int err = -errno;

                close(fd);
                return err;
        }
        return fd;
}

static void strv_free(char **names)
{
        if (!names)
                return;
        for (char **n = names; *n; n++)
                free(*n);
        free(names);
}

static void strv_freep(char ***names)
{
        strv_free(*names);
}

/* Index of the fd called `name`, else 0 (the first fd). */
static int listen_fd_pick(char **names, int n, const char *name)
{
        if (!names || !name)
                return 0;
        for (int i = 0; i < n && names[i]; i++)
                if (strcmp(names[i], name) == 0)
                        return i;
        return 0;
}

int d9d_notify_listen_fd(const char *name)
{
        _cleanup_(strv_freep) char **names = NULL;
        /* unset_environment = 1: children (e.g. `record -- CMD`) must not
         * believe the fds are theirs. */
        int n = sd_listen_fds_with_names(1, &names);

        if (n < 0)
                return n;
        if (n == 0)
                return -ENOENT;

        int pick = listen_fd_pick(names, n, name);
        int chosen = SD_LISTEN_FDS_START + pick;

        /* We serve one control socket; other passed fds would only leak. */
        for (int i = 0; i < n; i++)
                if (i != pick)
                        close(SD_LISTEN_FDS_START + i);

        int r = sd_is_socket_unix(chosen, SOCK_STREAM, 1, NULL, 0);

        if (r == 0)
                r = -ENOTSOCK;
        if (r >= 0 && fcntl(chosen, F_SETFD, FD_CLOEXEC) < 0)
                r = -errno;
        if (r < 0) {
                close(chosen);
                return r;
        }
        return chosen;
}
