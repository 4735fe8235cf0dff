/* control_server.c: the control socket. Accepts d9ctl connections, splits
 * their input into lines, answers each line with one JSON line. A client
 * that sends garbage gets an error and stays connected; a line longer than
 * D9_CONTROL_MAX_LINE is refused and skipped up to its newline. Replies
 * (a status of many sessions can exceed the socket buffer) are queued and
 * sent as the peer reads; one that lets more than MAX_PENDING_REPLY bytes
 * pile up is disconnected rather than allowed to hold d9d's memory. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cleanup.h"
#include "d9d.h"
#include "log.h"
#include "notify.h"
#include "proto/d9control.h"

#define MAX_PENDING_REPLY (16u << 20)

struct control_client {
        struct d9_watch w;
        struct control_server *cs;
        struct control_client *next;
        struct ucred peer;
        char *buf;
        size_t used;
        bool skipping;          /* discarding the rest of an oversized line */
        char *out;              /* reply bytes not sent yet: out[out_off..out_len) */
        size_t out_len, out_off;
};

struct control_server {
        struct d9_watch w;
        struct d9d *d;
        struct control_client *clients;
        bool owns_path;         /* we bound it (not socket-activated): unlink at exit */
};

static void client_free(struct control_client *c)
{
        struct control_client **pp = &c->cs->clients;

        while (*pp && *pp != c)
                pp = &(*pp)->next;
        if (*pp)
                *pp = c->next;
        d9d_watch_del(c->cs->d, &c->w);
        close(c->w.fd);
        free(c->buf);
        free(c->out);
        free(c);
}

static void client_drop(struct control_client *c)
{
        c->skipping = true;
        shutdown(c->w.fd, SHUT_RDWR);   /* recv sees the end and frees it */
}

/* Send what the socket takes; watch for room while anything is left. */
static void client_flush(struct control_client *c)
{
        while (c->out_off < c->out_len) {
                ssize_t n = send(c->w.fd, c->out + c->out_off, c->out_len - c->out_off,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        client_drop(c);
                        return;
                }
                c->out_off += (size_t)n;
        }
        if (c->out_off == c->out_len)
                c->out_off = c->out_len = 0;
        d9d_watch_mod(c->cs->d, &c->w, c->out_len ? EPOLLIN | EPOLLOUT : EPOLLIN);
}

static void client_reply(struct control_client *c, json_t *resp)
{
        size_t len;
        _cleanup_free_ char *line = d9c_encode_line(resp, &len);

        json_decref(resp);
        if (!line || c->out_len - c->out_off + len > MAX_PENDING_REPLY) {
                client_drop(c);
                return;
        }
        if (c->out_off) {
                memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
                c->out_len -= c->out_off;
                c->out_off = 0;
        }
        char *more = realloc(c->out, c->out_len + len);
        if (!more) {
                client_drop(c);
                return;
        }
        c->out = more;
        memcpy(c->out + c->out_len, line, len);
        c->out_len += len;
        client_flush(c);
}

static void client_handle_line(struct control_client *c, char *line, size_t len)
{
        char why[256];
        json_t *req = d9c_parse_request(line, len, why, sizeof(why));

        if (!req) {
                client_reply(c, d9c_error("%s", why));
                return;
        }
        client_reply(c, control_dispatch(c->cs->d, c->peer.uid, c->peer.pid, req));
        json_decref(req);
}

static void client_consume(struct control_client *c)
{
        char *nl;

        while ((nl = memchr(c->buf, '\n', c->used))) {
                size_t len = (size_t)(nl - c->buf);

                if (c->skipping)
                        c->skipping = false;
                else if (len)
                        client_handle_line(c, c->buf, len);
                memmove(c->buf, nl + 1, c->used - len - 1);
                c->used -= len + 1;
        }
        if (c->used == D9_CONTROL_MAX_LINE) {
                if (!c->skipping)
                        client_reply(c, d9c_error("request line longer than %d bytes", D9_CONTROL_MAX_LINE));
                c->skipping = true;
                c->used = 0;
        }
}

static void client_on_io(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct control_client *c = (struct control_client *)w;

        if (events & EPOLLOUT)
                client_flush(c);
        for (;;) {
                ssize_t r = recv(w->fd, c->buf + c->used, D9_CONTROL_MAX_LINE - c->used, MSG_DONTWAIT);

                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0 && errno == EAGAIN)
                        return;
                if (r <= 0) {
                        client_free(c);
                        return;
                }
                c->used += (size_t)r;
                client_consume(c);
        }
}

static void server_on_accept(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct control_server *cs = (struct control_server *)w;
        socklen_t len = sizeof(struct ucred);
        struct control_client *c;
        int fd = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

        if (fd < 0)
                return;
        c = calloc(1, sizeof(*c));
        if (!c || !(c->buf = malloc(D9_CONTROL_MAX_LINE)) ||
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->peer, &len) < 0) {
                if (c)
                        free(c->buf);
                free(c);
                close(fd);
                return;
        }
        c->cs = cs;
        c->w.fd = fd;
        c->w.fn = client_on_io;
        if (d9d_watch_add(d, &c->w, EPOLLIN) < 0) {
                free(c->buf);
                free(c);
                close(fd);
                return;
        }
        c->next = cs->clients;
        cs->clients = c;
}

static int bind_socket(const char *path, mode_t mode)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_free_ char *dir = strdup(path);
        char *slash;
        int fd;

        if (!dir || strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        return -errno;
        }
        memcpy(sa.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        unlink(path);   /* a stale socket from a previous run */
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, mode) < 0 ||
            listen(fd, 64) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

int control_server_start(struct d9d *d, struct control_server **out)
{
        struct control_server *cs = calloc(1, sizeof(*cs));
        int fd, r;

        if (!cs)
                return -ENOMEM;
        fd = notify_listen_fd("control");
        if (fd == -ENOENT) {
                fd = bind_socket(d->cfg.socket_path, d->cfg.socket_mode);
                cs->owns_path = fd >= 0;
                if (fd < 0)
                        log_error("cannot listen on %s: %s", d->cfg.socket_path, strerror(-fd));
        } else if (fd >= 0) {
                log_info("control socket inherited from the service manager");
        }
        if (fd < 0) {
                free(cs);
                return fd;
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); /* inherited fds may be blocking */
        cs->d = d;
        cs->w.fd = fd;
        cs->w.fn = server_on_accept;
        r = d9d_watch_add(d, &cs->w, EPOLLIN);
        if (r < 0) {
                close(fd);
                free(cs);
                return r;
        }
        *out = cs;
        return 0;
}

void control_server_stop(struct control_server *cs)
{
        if (!cs)
                return;
        while (cs->clients)
                client_free(cs->clients);
        d9d_watch_del(cs->d, &cs->w);
        close(cs->w.fd);
        if (cs->owns_path)
                unlink(cs->d->cfg.socket_path);
        free(cs);
}
