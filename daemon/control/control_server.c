/* control_server.c: the control socket. Accepts d9ctl connections, splits
 * their input into lines, answers each line with one JSON line. A client
 * that sends garbage gets an error and stays connected; a line longer than
 * D9_CONTROL_MAX_LINE is refused and skipped up to its newline.
 *
 * Every member of the socket group shares this loop with the ring buffers
 * of root's sessions, so no client may hold it or d9d's memory:
 *  - a non-root uid keeps at most MAX_CONN_PER_UID connections (all non-root
 *    uids together MAX_CONN_NONROOT); more are answered with an error line
 *    and closed at once;
 *  - replies are queued and sent as the peer reads; while more than
 *    OUT_HIGH bytes wait, no further request of that client is read (its
 *    own socket buffer fills, not d9d's memory); one reply that would make
 *    more than MAX_PENDING_REPLY bytes wait, or a non-root uid with more
 *    than UID_MAX_PENDING waiting on all its connections, is disconnected;
 *  - at most one read and LINES_PER_TURN requests per client per loop turn;
 *    requests left over wait for the next turn (the kick eventfd);
 *  - a connection that neither sends a request nor takes reply bytes for
 *    control_idle_ms is closed (unless d9d still owes it a reply);
 *  - a request answered later (an attach waits for its plan) holds back
 *    the client's next requests until its reply is queued; a client gone
 *    meanwhile tells the request's owner, which cancels the work;
 *  - out of descriptors, a reserve descriptor is given up to accept and
 *    close the waiting connection (so the listening socket does not stay
 *    readable and spin the loop); without a reserve, accepting pauses until
 *    the next sweep. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/core/cleanup.h"
#include "daemon/core/d9d.h"
#include "daemon/core/log.h"
#include "daemon/core/notify.h"
#include "proto/d9control.h"

#define MAX_PENDING_REPLY (16u << 20)
#define UID_MAX_PENDING (16u << 20)
#define OUT_HIGH (8u << 20)
#define MAX_CONN_PER_UID 16
#define MAX_CONN_NONROOT 256
#define LINES_PER_TURN 8
#define ACCEPTS_PER_TURN 16
#define SWEEP_MS 500
#define FD_WARN_EVERY_MS 10000
#define STR_(x) #x
#define STR(x) STR_(x)

struct control_client {
        struct d9_watch w;
        struct control_server *cs;
        struct control_client *next;
        struct ucred peer;
        char *buf;
        size_t used;
        bool skipping;          /* discarding the rest of an oversized line */
        bool dead;              /* dropped: freed by whoever holds it last */
        bool backlog;           /* complete lines left in buf for a later turn */
        bool eof;               /* the peer sent all it will: answer, flush, close */
        uint32_t events;        /* what the watch currently asks epoll for */
        uint64_t active_ms;     /* last request or reply progress */
        struct control_reply *pending; /* a reply owed to it, not queued yet */
        char *out;              /* reply bytes not sent yet: out[out_off..out_len) */
        size_t out_len, out_off, out_cap;
};

struct control_reply {
        struct control_client *c;       /* NULL once the client is gone */
        void (*gone)(void *ctx);
        void *ctx;
};

struct control_server {
        struct d9_watch w;
        struct d9_watch kick_w; /* eventfd: some client has a backlog */
        struct d9_watch sweep_w; /* timerfd: idle timeouts, accept resume */
        struct d9d *d;
        struct control_client *clients;
        int reserve_fd;         /* given up to accept one connection at EMFILE */
        bool accept_paused;
        uint64_t fd_warned_ms;
        bool owns_path;         /* we bound it (not socket-activated): unlink at exit */
};

static size_t client_unsent(const struct control_client *c)
{
        return c->out_len - c->out_off;
}

static void client_free(struct control_client *c)
{
        struct control_client **pp = &c->cs->clients;
        struct control_reply *owed = c->pending;

        if (owed) {
                owed->c = NULL;
                owed->gone(owed->ctx);
        }

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
        c->dead = true;
        shutdown(c->w.fd, SHUT_RDWR);
}

/* Ask epoll for input only while this client may send more requests. */
static void client_update_events(struct control_client *c)
{
        uint32_t want = 0;

        if (c->dead)
                return;
        if (!c->eof && !c->backlog && !c->pending && client_unsent(c) <= OUT_HIGH)
                want |= EPOLLIN;
        if (client_unsent(c))
                want |= EPOLLOUT;
        if (want != c->events && d9d_watch_mod(c->cs->d, &c->w, want) == 0)
                c->events = want;
}

/* Send what the socket takes. */
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
                c->active_ms = d9_now_ms();
        }
        if (c->out_off == c->out_len) {
                c->out_off = c->out_len = 0;
                if (c->out_cap > 65536) {
                        free(c->out);   /* a big status reply should not stay resident */
                        c->out = NULL;
                        c->out_cap = 0;
                }
        }
}

static size_t uid_unsent(const struct control_server *cs, uid_t uid)
{
        size_t sum = 0;

        for (const struct control_client *c = cs->clients; c; c = c->next)
                if (c->peer.uid == uid)
                        sum += client_unsent(c);
        return sum;
}

static void client_reply(struct control_client *c, json_t *resp)
{
        size_t len;
        _cleanup_free_ char *line = d9c_encode_line(resp, &len);

        json_decref(resp);
        if (!line || client_unsent(c) + len > MAX_PENDING_REPLY ||
            (c->peer.uid != 0 && uid_unsent(c->cs, c->peer.uid) + len > UID_MAX_PENDING)) {
                client_drop(c);
                return;
        }
        if (c->out_off) {
                memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
                c->out_len -= c->out_off;
                c->out_off = 0;
        }
        if (c->out_len + len > c->out_cap) {
                size_t cap = c->out_cap ? c->out_cap : 4096;

                while (cap < c->out_len + len)
                        cap *= 2;
                char *more = realloc(c->out, cap);
                if (!more) {
                        client_drop(c);
                        return;
                }
                c->out = more;
                c->out_cap = cap;
        }
        memcpy(c->out + c->out_len, line, len);
        c->out_len += len;
        client_flush(c);
}

static void client_handle_line(struct control_client *c, char *line, size_t len)
{
        char why[256];
        json_t *req = d9c_parse_request(line, len, why, sizeof(why));

        c->active_ms = d9_now_ms();
        if (!req) {
                client_reply(c, d9c_error("%s", why));
                return;
        }
        json_t *resp = control_dispatch(c->cs->d, c, c->peer.uid, c->peer.pid, req);
        if (resp)
                client_reply(c, resp);
        json_decref(req);
}

/* Answers up to LINES_PER_TURN complete lines of buf, fewer once the
 * replies pile up; says in c->backlog whether complete lines remain. */
static void client_consume(struct control_client *c)
{
        size_t off = 0;
        int lines = 0;
        char *nl;

        while (!c->dead && !c->pending && lines < LINES_PER_TURN && client_unsent(c) <= OUT_HIGH &&
               (nl = memchr(c->buf + off, '\n', c->used - off))) {
                size_t len = (size_t)(nl - (c->buf + off));

                if (c->skipping)
                        c->skipping = false;
                else if (len) {
                        client_handle_line(c, c->buf + off, len);
                        lines++;
                }
                off += len + 1;
        }
        if (off) {
                memmove(c->buf, c->buf + off, c->used - off);
                c->used -= off;
        }
        c->backlog = !c->dead && memchr(c->buf, '\n', c->used) != NULL;
        if (!c->backlog && c->used == D9_CONTROL_MAX_LINE) {
                if (!c->skipping)
                        client_reply(c, d9c_error("request line longer than %d bytes", D9_CONTROL_MAX_LINE));
                c->skipping = true;
                c->used = 0;
        }
}

static void kick(struct control_server *cs)
{
        uint64_t one = 1;

        (void)!write(cs->kick_w.fd, &one, sizeof(one));
}

/* The end of every client event: free a finished client, or ask for the
 * events it can take now and a later turn for requests it has left. Only
 * the client's own event may free it: the loop's current batch of events
 * may still hold its watch. Elsewhere it is shut down, and the hangup
 * event that follows frees it. */
static void client_settle(struct control_client *c, bool own_event)
{
        if (c->dead || (c->eof && !c->backlog && !c->pending && !client_unsent(c))) {
                if (own_event)
                        client_free(c);
                else
                        client_drop(c);
                return;
        }
        if (c->backlog && !c->pending && client_unsent(c) <= OUT_HIGH)
                kick(c->cs);
        client_update_events(c);
}

static void client_on_io(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct control_client *c = (struct control_client *)w;

        if (events & (EPOLLERR | EPOLLHUP)) {
                client_free(c); /* the peer is gone: nobody reads the replies */
                return;
        }
        if (events & EPOLLOUT)
                client_flush(c);
        if (!c->dead && c->backlog && !c->pending)
                client_consume(c);      /* unblocked by the flush */
        if ((events & EPOLLIN) && !c->dead && !c->eof && !c->backlog && !c->pending && client_unsent(c) <= OUT_HIGH) {
                ssize_t r;

                do
                        r = recv(w->fd, c->buf + c->used, D9_CONTROL_MAX_LINE - c->used, MSG_DONTWAIT);
                while (r < 0 && errno == EINTR);
                if (r < 0 && errno != EAGAIN) {
                        client_free(c);
                        return;
                }
                c->eof = r == 0;
                if (r > 0) {
                        c->used += (size_t)r;
                        client_consume(c);
                }
        }
        client_settle(c, true);
}

struct control_reply *control_reply_defer(struct control_client *c, void (*gone)(void *ctx), void *ctx)
{
        struct control_reply *r;

        if (c->pending || !(r = calloc(1, sizeof(*r))))
                return NULL;
        *r = (struct control_reply){ c, gone, ctx };
        c->pending = r;
        return r;
}

/* Runs outside the client's own event: the client is settled, not freed
 * (its hangup event does that), and its next requests get a turn. */
void control_reply_finish(struct control_reply *r, json_t *resp)
{
        struct control_client *c = r->c;

        free(r);
        if (!c) {
                json_decref(resp);
                return;
        }
        c->pending = NULL;
        c->active_ms = d9_now_ms();
        if (resp)
                client_reply(c, resp);
        client_settle(c, false);
}

/* One turn for every client with requests left over. */
static void server_on_kick(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct control_server *cs = (struct control_server *)((char *)w - offsetof(struct control_server, kick_w));
        struct control_client *c, *next;
        uint64_t n;

        (void)!read(w->fd, &n, sizeof(n));
        for (c = cs->clients; c; c = next) {
                next = c->next;
                if (!c->backlog || c->pending || client_unsent(c) > OUT_HIGH)
                        continue;
                client_consume(c);
                client_settle(c, false);
        }
}

static void refuse(int fd, const char *why)
{
        size_t len;
        _cleanup_free_ char *line = NULL;
        json_t *e = d9c_error("%s", why);

        line = d9c_encode_line(e, &len);
        json_decref(e);
        if (line)
                (void)!send(fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(fd);
}

/* Out of descriptors: accept the waiting connection on the reserve
 * descriptor and close it, so it is told and not left pending. */
static void server_out_of_fds(struct control_server *cs, int err)
{
        uint64_t now = d9_now_ms();

        if (!cs->fd_warned_ms || now - cs->fd_warned_ms >= FD_WARN_EVERY_MS) {
                log_warn("control socket: cannot accept a connection (%s); refusing new ones until "
                         "descriptors are free", strerror(err));
                cs->fd_warned_ms = now;
        }
        if (cs->reserve_fd >= 0) {
                close(cs->reserve_fd);
                int fd = accept4(cs->w.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd >= 0)
                        refuse(fd, "d9d is out of file descriptors; try again later");
                cs->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        if (cs->reserve_fd < 0 && !cs->accept_paused &&
            d9d_watch_mod(cs->d, &cs->w, 0) == 0)
                cs->accept_paused = true;       /* the sweep resumes it */
}

/* Why a connection of this uid is not taken, or NULL. */
static const char *over_limits(const struct control_server *cs, uid_t uid)
{
        unsigned mine = 0, nonroot = 0;

        if (uid == 0)
                return NULL;
        for (const struct control_client *c = cs->clients; c; c = c->next) {
                mine += c->peer.uid == uid;
                nonroot += c->peer.uid != 0;
        }
        if (mine >= MAX_CONN_PER_UID)
                return "too many connections from this uid (at most " STR(MAX_CONN_PER_UID) ")";
        if (nonroot >= MAX_CONN_NONROOT)
                return "too many connections to d9d; try again later";
        return NULL;
}

static void server_accept_one(struct control_server *cs, int fd)
{
        socklen_t len = sizeof(struct ucred);
        struct control_client *c = calloc(1, sizeof(*c));
        const char *why;

        if (!c || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->peer, &len) < 0) {
                free(c);
                close(fd);
                return;
        }
        if ((why = over_limits(cs, c->peer.uid))) {
                free(c);
                refuse(fd, why);
                return;
        }
        c->cs = cs;
        c->w.fd = fd;
        c->w.fn = client_on_io;
        c->events = EPOLLIN;
        c->active_ms = d9_now_ms();
        if (!(c->buf = malloc(D9_CONTROL_MAX_LINE)) || d9d_watch_add(cs->d, &c->w, EPOLLIN) < 0) {
                free(c->buf);
                free(c);
                close(fd);
                return;
        }
        c->next = cs->clients;
        cs->clients = c;
}

static void server_on_accept(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct control_server *cs = (struct control_server *)w;

        for (int i = 0; i < ACCEPTS_PER_TURN; i++) {
                int fd = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

                if (fd >= 0) {
                        server_accept_one(cs, fd);
                        continue;
                }
                if (errno == EINTR || errno == ECONNABORTED)
                        continue;
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                        server_out_of_fds(cs, errno);
                return;
        }
}

/* Closes idle connections; resumes a paused accept. */
static void server_on_sweep(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct control_server *cs = (struct control_server *)((char *)w - offsetof(struct control_server, sweep_w));
        uint64_t n, now = d9_now_ms();
        struct control_client *c, *next;

        (void)!read(w->fd, &n, sizeof(n));
        for (c = cs->clients; c; c = next) {
                next = c->next;
                if (!c->dead && !c->pending && now - c->active_ms >= d->cfg.control_idle_ms)
                        client_drop(c); /* its hangup event frees it */
        }
        if (cs->reserve_fd < 0)
                cs->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (cs->accept_paused && d9d_watch_mod(d, &cs->w, EPOLLIN) == 0)
                cs->accept_paused = false;
}

/* What is at path may be replaced only if it is a socket nobody listens on
 * (left by a d9d that did not exit cleanly). Anything else - a file, a
 * directory, a symlink, another d9d's live socket - is refused, since
 * unlinking it would lose data or cut that daemon off from its clients
 * with its programs still attached. */
static int clear_stale_socket(const char *path, const struct sockaddr_un *sa, const char **why)
{
        struct stat st;
        int fd, r;

        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISSOCK(st.st_mode)) {
                *why = "it exists and is not a socket; refusing to replace it";
                return -EEXIST;
        }
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0 ? -errno : 0;
        close(fd);
        if (r == -ECONNREFUSED) {
                log_info("removing stale socket %s", path);
                return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
        }
        /* accepted, or a full backlog (EAGAIN): someone listens there */
        *why = "it is the socket of a running daemon; refusing to replace it";
        return -EADDRINUSE;
}

static int bind_socket(const char *path, mode_t mode, const char **why)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_free_ char *dir = strdup(path);
        char *slash;
        int fd, r;

        if (!dir || strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        return -errno;
        }
        memcpy(sa.sun_path, path, strlen(path) + 1);
        r = clear_stale_socket(path, &sa, why);
        if (r < 0)
                return r;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        /* bind() itself fails with EADDRINUSE if something appeared at path
         * since the check: nothing is ever unlinked but a dead socket. */
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, mode) < 0 ||
            listen(fd, 128) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

static int server_timers_start(struct control_server *cs)
{
        struct itimerspec its = { .it_interval = { 0, SWEEP_MS * 1000000L },
                                  .it_value = { 0, SWEEP_MS * 1000000L } };

        cs->kick_w.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        cs->kick_w.fn = server_on_kick;
        cs->sweep_w.fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        cs->sweep_w.fn = server_on_sweep;
        cs->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (cs->kick_w.fd < 0 || cs->sweep_w.fd < 0 || cs->reserve_fd < 0 ||
            timerfd_settime(cs->sweep_w.fd, 0, &its, NULL) < 0)
                return -errno;
        if (d9d_watch_add(cs->d, &cs->kick_w, EPOLLIN) < 0 || d9d_watch_add(cs->d, &cs->sweep_w, EPOLLIN) < 0)
                return -errno;
        return 0;
}

static void server_timers_stop(struct control_server *cs)
{
        if (cs->kick_w.fd >= 0) {
                d9d_watch_del(cs->d, &cs->kick_w);
                close(cs->kick_w.fd);
        }
        if (cs->sweep_w.fd >= 0) {
                d9d_watch_del(cs->d, &cs->sweep_w);
                close(cs->sweep_w.fd);
        }
        if (cs->reserve_fd >= 0)
                close(cs->reserve_fd);
}

int control_server_start(struct d9d *d, struct control_server **out)
{
        struct control_server *cs = calloc(1, sizeof(*cs));
        int fd, r;

        if (!cs)
                return -ENOMEM;
        cs->kick_w.fd = cs->sweep_w.fd = cs->reserve_fd = -1;
        fd = d9d_notify_listen_fd("control");
        if (fd == -ENOENT) {
                const char *why = NULL;

                fd = bind_socket(d->cfg.socket_path, d->cfg.socket_mode, &why);
                cs->owns_path = fd >= 0;
                if (fd < 0)
                        log_error("cannot listen on %s: %s", d->cfg.socket_path, why ? why : strerror(-fd));
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
        r = server_timers_start(cs);
        if (r == 0)
                r = d9d_watch_add(d, &cs->w, EPOLLIN);
        if (r < 0) {
                log_error("cannot set up the control socket: %s", strerror(-r));
                server_timers_stop(cs);
                if (cs->owns_path)
                        unlink(d->cfg.socket_path);
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
        server_timers_stop(cs);
        d9d_watch_del(cs->d, &cs->w);
        close(cs->w.fd);
        if (cs->owns_path)
                unlink(cs->d->cfg.socket_path);
        free(cs);
}
