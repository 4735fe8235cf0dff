/* loop.c: the epoll registration helpers every daemon module shares; the
 * loop itself runs in main.c (clocks: d9_now_ns in proto). */
#include <errno.h>
#include <sys/epoll.h>

#include "daemon/core/d9d.h"

int d9d_watch_add(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct epoll_event ev = { .events = events, .data.ptr = w };

        return epoll_ctl(d->epfd, EPOLL_CTL_ADD, w->fd, &ev) < 0 ? -errno : 0;
}

int d9d_watch_mod(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct epoll_event ev = { .events = events, .data.ptr = w };

        return epoll_ctl(d->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0 ? -errno : 0;
}

void d9d_watch_del(struct d9d *d, struct d9_watch *w)
{
        epoll_ctl(d->epfd, EPOLL_CTL_DEL, w->fd, NULL);
}
