/* accept_queue.c: sock_diag (inet_diag) dumps of TCP sockets in LISTEN
 * state, IPv4 and IPv6. For a listener the kernel reports the accept queue
 * in idiag_rqueue (sk_ack_backlog: connections completed and not yet
 * accepted) and the backlog in idiag_wqueue (sk_max_ack_backlog). A dump
 * lists every listener of the namespace; the target's are those whose inode
 * is one of its fds' "socket:[N]" links, read first only when the netns
 * has a listener at all. Bounded: ACCEPT_QUEUE_LISTENERS_MAX listeners and
 * ACCEPT_QUEUE_FDS_MAX fds per read, a receive timeout on the socket. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "daemon/record/accept_queue.h"
#include "daemon/core/cleanup.h"

int accept_queue_socket(int pidfd, int own_netns_fd)
{
        struct timeval tv = { .tv_sec = 1 };
        int fd, r = 0;

        if (setns(pidfd, CLONE_NEWNET) < 0)
                return -errno;
        fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (fd < 0)
                r = -errno;
        /* Back home before anything else: this thread's later sockets and
         * the caller's must not land in the target's namespace. */
        if (setns(own_netns_fd, CLONE_NEWNET) < 0) {
                if (fd >= 0)
                        close(fd);
                return -errno;  /* the caller must stop using this thread */
        }
        if (r < 0)
                return r;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

struct listener {
        struct d9_accept_queue q;
        uint8_t matched;
};

struct dump {
        struct listener *l;
        size_t n;
        struct accept_queue_counts *counts;
};

static void listener_add(struct dump *dp, const struct inet_diag_msg *m)
{
        struct d9_accept_queue *q;

        if (m->idiag_state != TCP_LISTEN || !m->idiag_inode)
                return;
        if (dp->n == ACCEPT_QUEUE_LISTENERS_MAX) {
                dp->counts->listeners_over++;
                return;
        }
        q = &dp->l[dp->n++].q;
        memset(q, 0, sizeof(*q));
        q->socket_cookie = (uint64_t)m->id.idiag_cookie[0] | (uint64_t)m->id.idiag_cookie[1] << 32;
        q->socket_inode = m->idiag_inode;
        q->ip_version = m->idiag_family == AF_INET6 ? 6 : 4;
        q->protocol = IPPROTO_TCP;
        inet_ntop(m->idiag_family, m->id.idiag_src, q->local_addr, sizeof(q->local_addr));
        q->local_port = ntohs(m->id.idiag_sport);
        q->pending_connections = m->idiag_rqueue;
        q->backlog_limit = m->idiag_wqueue;
}

/* One datagram of the dump's answer: 1 = done, 0 = more, < 0 error. */
static int dump_parse(struct dump *dp, const char *buf, size_t len, uint32_t seq)
{
        for (const struct nlmsghdr *h = (const void *)buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
                if (h->nlmsg_seq != seq)
                        continue;
                if (h->nlmsg_type == NLMSG_DONE)
                        return 1;
                if (h->nlmsg_type == NLMSG_ERROR) {
                        const struct nlmsgerr *e = NLMSG_DATA(h);
                        return h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error ? e->error : -EIO;
                }
                if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY && h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
                        listener_add(dp, NLMSG_DATA(h));
        }
        return 0;
}

static int dump_family(int diag_fd, uint8_t family, uint32_t seq, struct dump *dp)
{
        struct {
                struct nlmsghdr h;
                struct inet_diag_req_v2 r;
        } req = {
                .h = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = seq },
                .r = { .sdiag_family = family, .sdiag_protocol = IPPROTO_TCP,
                       .idiag_states = 1u << TCP_LISTEN },
        };
        struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
        static __thread char buf[32768];

        if (sendto(diag_fd, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
                return -errno;
        /* A namespace with 100 000 listeners is a few hundred datagrams:
         * bounded by the kernel's dump, and each recv by the timeout. */
        for (;;) {
                ssize_t n = recv(diag_fd, buf, sizeof(buf), 0);
                int r;

                if (n < 0)
                        return errno == EAGAIN ? -ETIMEDOUT : -errno;
                if (n == 0)
                        return -EIO;
                r = dump_parse(dp, buf, (size_t)n, seq);
                if (r)
                        return r < 0 ? r : 0;
        }
}

/* Marks the listeners whose inode one of the target's fds holds. */
static int match_fds(int proc_fd, struct dump *dp)
{
        int fd_dir = openat(proc_fd, "fd", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct dirent *de;
        size_t seen = 0;
        DIR *dir;

        if (fd_dir < 0)
                return -errno;
        dir = fdopendir(fd_dir);
        if (!dir) {
                close(fd_dir);
                return -errno;
        }
        while ((de = readdir(dir))) {
                char link[64];
                unsigned long long ino;
                ssize_t n;

                if (de->d_name[0] == '.')
                        continue;
                if (++seen > ACCEPT_QUEUE_FDS_MAX) {
                        dp->counts->fds_over++;
                        continue;
                }
                n = readlinkat(fd_dir, de->d_name, link, sizeof(link) - 1);
                if (n <= 0)
                        continue;
                link[n] = 0;
                if (sscanf(link, "socket:[%llu]", &ino) != 1)
                        continue;
                for (size_t i = 0; i < dp->n; i++)
                        if (dp->l[i].q.socket_inode == ino)
                                dp->l[i].matched = 1;
        }
        closedir(dir);
        return 0;
}

int accept_queue_read(int diag_fd, int proc_fd, struct d9_accept_queue *out, size_t max, size_t *n,
                      struct accept_queue_counts *counts)
{
        _cleanup_free_ struct listener *l = calloc(ACCEPT_QUEUE_LISTENERS_MAX, sizeof(*l));
        struct dump dp = { .l = l, .counts = counts };
        static __thread uint32_t seq;
        int r;

        *n = 0;
        if (!l)
                return -ENOMEM;
        r = dump_family(diag_fd, AF_INET, ++seq, &dp);
        if (r == 0)
                r = dump_family(diag_fd, AF_INET6, ++seq, &dp);
        if (r < 0 || !dp.n)
                return r;
        r = match_fds(proc_fd, &dp);
        for (size_t i = 0; r == 0 && i < dp.n && *n < max; i++)
                if (l[i].matched)
                        out[(*n)++] = l[i].q;
        return r;
}
