/* d9d.h: the daemon's internal core: the event loop every other daemon
 * module registers its file descriptors with, and the state they share. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

struct d9d;
struct session;

/* One epoll registration. The loop calls fn with the ready events. */
struct d9_watch {
        int fd;
        void (*fn)(struct d9d *d, struct d9_watch *w, uint32_t events);
};

struct d9d {
        struct d9d_config cfg;
        int epfd;
        bool stopping;
        struct session *sessions;       /* live and finished sessions, newest first */
        struct sealer *sealer;
        struct control_server *control;
        struct shipper *shipper;        /* NULL unless s3_* is configured */
        char traces_dir[PATH_MAX];      /* <state_dir>/traces */
        char host[256];
};

int d9d_watch_add(struct d9d *d, struct d9_watch *w, uint32_t events);
int d9d_watch_mod(struct d9d *d, struct d9_watch *w, uint32_t events);
void d9d_watch_del(struct d9d *d, struct d9_watch *w);
uint64_t d9_now_ms(void);       /* CLOCK_MONOTONIC, milliseconds */
uint64_t d9_now_ns(void);

/* control_server.c */
int control_server_start(struct d9d *d, struct control_server **out);
void control_server_stop(struct control_server *cs);

/* control_cmds.c: one handler per request "cmd"; the response object is
 * always returned (never NULL) and owned by the caller. */
json_t *control_dispatch(struct d9d *d, uid_t peer_uid, pid_t peer_pid, json_t *req);
