/* notify: talking to the service manager. sd_notify state changes
 * (READY/STATUS/WATCHDOG/STOPPING), the watchdog interval, and the control
 * socket inherited through socket activation (LISTEN_FDS).
 *
 * Every function is a no-op returning 0 when d9d was not started by systemd
 * (no NOTIFY_SOCKET / WATCHDOG_USEC / LISTEN_FDS), so callers need no
 * "are we under systemd?" branches. Errors are negative errno. */
#pragma once

#include <stdint.h>

/* "READY=1" plus an optional STATUS= line (status may be NULL). Call once the
 * control socket is listening and startup recovery is done. */
int d9d_notify_ready(const char *status);

/* "STATUS=<printf text>": one line shown by `systemctl status d9d`. */
int d9d_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "WATCHDOG=1": call from the main loop, at least every
 * d9d_notify_watchdog_usec() / 2, so a wedged loop gets the service restarted. */
int d9d_notify_watchdog(void);

/* "STOPPING=1" plus an optional STATUS= line: call when SIGTERM arrives,
 * before sealing segments, so systemd shows we are shutting down. */
int d9d_notify_stopping(const char *status);

/* WATCHDOG_USEC for this process (0 when the watchdog is off). */
uint64_t d9d_notify_watchdog_usec(void);

/* A CLOCK_MONOTONIC timerfd (non-blocking, close-on-exec) that fires every
 * half watchdog interval: add it to epoll, read() it when readable, then
 * call d9d_notify_watchdog(). Returns the fd, -ENODATA when the watchdog is off,
 * or a negative errno. The caller owns (closes) the fd. */
int d9d_notify_watchdog_timerfd(void);

/* The listening control socket passed by socket activation: the fd named
 * `name` (FileDescriptorName= in d9d.socket; d9d.socket names it "control"),
 * else the first passed fd. It is checked to be a listening AF_UNIX stream
 * socket and made close-on-exec; LISTEN_* are removed from the environment so
 * children do not see them. Returns the fd, -ENOENT when no fds were passed
 * (then d9d binds its socket itself), or a negative errno (e.g. -ENOTSOCK
 * when the passed fd is not a Unix stream listener). */
int d9d_notify_listen_fd(const char *name);
