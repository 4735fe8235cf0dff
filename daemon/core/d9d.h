/* d9d.h: the daemon's internal core: the event loop every other daemon
 * module registers its file descriptors with, and the state they share. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/core/config.h"
#include "proto/d9proto.h"      /* d9_now_ms, d9_now_ns */

struct d9d;
struct session;
struct control_client;
struct control_reply;

/* One epoll registration. The loop calls fn with the ready events. */
struct d9_watch {
        int fd;
        void (*fn)(struct d9d *d, struct d9_watch *w, uint32_t events);
        bool first;     /* served before the others ready in the same turn */
};

struct d9d {
        struct d9d_config cfg;
        int epfd;
        bool stopping;
        struct session *sessions;       /* live and finished sessions, newest first */
        struct sealer *sealer;
        struct planner *planner;        /* probe plans, off this loop */
        struct planner *bpf_worker;     /* BPF loads, installs and stops, off this loop */
        struct sampler *sampler;        /* resource and accept-queue samples, off this loop */
        struct control_server *control;
        struct shipper *shipper;        /* NULL unless s3_* is configured */
        struct autoattach *autoattach;  /* NULL without attach = rules */
        char traces_dir[PATH_MAX];      /* <state_dir>/traces */
        char host[256];
};

int d9d_watch_add(struct d9d *d, struct d9_watch *w, uint32_t events);
int d9d_watch_mod(struct d9d *d, struct d9_watch *w, uint32_t events);
void d9d_watch_del(struct d9d *d, struct d9_watch *w);
/* session_tick's period */
#define D9D_TICK_MS 250u

/* control_server.c */
int control_server_start(struct d9d *d, struct control_server **out);
void control_server_stop(struct control_server *cs);

/* A reply owed to one request and sent when its work is done (an attach
 * waits for its probe plan). Until then the client's further requests wait
 * unread, so replies keep their order. If the client goes away first,
 * gone(ctx) is called once; the owner still finishes the reply, which then
 * only frees it. */
struct control_reply *control_reply_defer(struct control_client *c, void (*gone)(void *ctx), void *ctx);
void control_reply_finish(struct control_reply *r, json_t *resp);      /* takes resp */

/* control_cmds.c: one handler per request "cmd"; the response object is
 * returned and owned by the caller, or NULL once the handler took a
 * control_reply_defer() of c to answer later. */
json_t *control_dispatch(struct d9d *d, struct control_client *c, uid_t peer_uid, pid_t peer_pid, json_t *req);

/* main.c: how long the loop was kept from epoll_wait by one batch of
 * events, the longest since start and in the last 10-20 s. */
void d9d_loop_stall(uint64_t *max_ms, uint64_t *recent_max_ms);
