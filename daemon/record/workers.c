/* workers.c: the worker-id table of one target's trace (see workers.h). */
#include <stdio.h>
#include <string.h>

#include "proto/d9proto.h"
#include "daemon/record/workers.h"

void workers_init(struct tr_workers *ws)
{
        memset(ws, 0, sizeof(*ws));
}

bool workers_in_use(const struct tr_workers *ws, uint32_t w)
{
        return w < ws->n && ws->w[w].used;
}

/* A worker is known by less than its index: by its thread or park key. */
static bool known_by_less(const struct tr_workers *ws, uint32_t w)
{
        return workers_in_use(ws, w) && !ws->w[w].index;
}

/* A free id: `want` if it is free, else the lowest one given back, else
 * the next new one. Tokio's index is wanted, so a process with one
 * runtime gets Tokio's own numbering whatever order its workers show up. */
static uint32_t id_take(struct tr_workers *ws, uint32_t want)
{
        uint32_t w = D9_WORKER_NONE;

        if (want < TR_MAX_WORKERS && !(want < ws->n && ws->w[want].used)) {
                w = want;
        } else {
                for (uint32_t i = 0; i < ws->n && w == D9_WORKER_NONE; i++)
                        if (!ws->w[i].used)
                                w = i;
                if (w == D9_WORKER_NONE && ws->n < TR_MAX_WORKERS)
                        w = ws->n;
        }
        if (w == D9_WORKER_NONE)
                return w;
        /* Ids skipped on the way to `want` are free, not used. */
        while (ws->n <= w)
                ws->w[ws->n++] = (struct tr_worker){ .rt = TR_RT_UNKNOWN };
        ws->w[w] = (struct tr_worker){ .rt = TR_RT_UNKNOWN, .used = true };
        ws->changed = true;
        return w;
}

void workers_give_back(struct tr_workers *ws, uint32_t w)
{
        if (!workers_in_use(ws, w))
                return;
        ws->w[w].used = false;
        ws->changed = true;
}

/* The runtime index of Handle (or core key) key, added if new;
 * TR_RT_UNKNOWN past TR_MAX_RUNTIMES. */
static uint8_t runtime_add(struct tr_workers *ws, uint64_t key)
{
        uint32_t rt = 0;

        while (rt < ws->n_runtimes && ws->rt_keys[rt] != key)
                rt++;
        if (rt < ws->n_runtimes)
                return (uint8_t)rt;
        if (rt == TR_MAX_RUNTIMES) {
                ws->rt_overflow++;
                return TR_RT_UNKNOWN;
        }
        ws->rt_keys[ws->n_runtimes++] = key;
        return (uint8_t)rt;
}

static uint8_t runtime_of(const struct tr_workers *ws, uint64_t key)
{
        for (uint32_t rt = 0; key && rt < ws->n_runtimes; rt++)
                if (ws->rt_keys[rt] == key)
                        return (uint8_t)rt;
        return TR_RT_UNKNOWN;
}

uint64_t workers_rt_core_key(uint64_t core)
{
        return ((uint64_t)1 << 62) | core;
}

static bool rt_key_is_core(uint64_t key)
{
        return key >> 62 == 1;
}

uint32_t workers_by_index(struct tr_workers *ws, uint64_t rt_handle, uint32_t index, uint32_t cur)
{
        uint8_t rt = rt_handle ? runtime_add(ws, rt_handle) : TR_RT_UNKNOWN;
        uint32_t w;

        for (w = 0; w < ws->n; w++)
                if (ws->w[w].used && ws->w[w].index == index && ws->w[w].rt == rt)
                        break;
        if (w < ws->n) {
                /* cur stood in for this worker before its index showed. */
                if (cur != w && known_by_less(ws, cur)) {
                        if (!ws->w[w].park_key)
                                ws->w[w].park_key = ws->w[cur].park_key;
                        workers_give_back(ws, cur);
                }
                return w;
        }
        /* The stand-in is this worker: its lane goes on under the same id. */
        if (known_by_less(ws, cur))
                w = cur;
        else if ((w = id_take(ws, index - 1)) == D9_WORKER_NONE)
                return w;
        ws->w[w].index = index;
        ws->w[w].thread = 0;
        if (ws->w[w].rt != rt)
                ws->changed = true;
        ws->w[w].rt = rt;
        return w;
}

uint32_t workers_by_park_key(struct tr_workers *ws, uint64_t key, uint32_t cur)
{
        uint32_t w;

        for (w = 0; w < ws->n; w++)
                if (ws->w[w].used && ws->w[w].park_key == key)
                        break;
        if (w < ws->n) {
                /* A thread's stand-in id whose core turns out known. */
                if (cur != w && workers_in_use(ws, cur) && ws->w[cur].thread && !ws->w[cur].park_key)
                        workers_give_back(ws, cur);
                return w;
        }
        /* The thread polled before it first parked: its id is this core's.
         * One that already has a key (or an index) keeps it: the core it
         * parks with now is another. */
        if (workers_in_use(ws, cur) && !ws->w[cur].park_key && (ws->w[cur].thread || ws->w[cur].index))
                w = cur;
        else if ((w = id_take(ws, TR_MAX_WORKERS)) == D9_WORKER_NONE)
                return w;
        ws->w[w].park_key = key;
        ws->w[w].thread = 0;
        return w;
}

void workers_set_park_key(struct tr_workers *ws, uint32_t w, uint64_t key)
{
        if (!workers_in_use(ws, w) || !key || ws->w[w].park_key == key)
                return;
        for (uint32_t i = 0; i < ws->n; i++)
                if (i != w && ws->w[i].used && ws->w[i].park_key == key) {
                        ws->w[i].park_key = 0;
                        if (!ws->w[i].index)
                                workers_give_back(ws, i);
                }
        ws->w[w].park_key = key;
}

uint32_t workers_for_thread(struct tr_workers *ws, uint32_t tid)
{
        uint32_t w = id_take(ws, TR_MAX_WORKERS);

        if (w != D9_WORKER_NONE)
                ws->w[w].thread = tid;
        return w;
}

/* A worker polled a task whose scheduler is sched: the worker belongs to
 * that runtime (all tasks of one runtime share its Handle's Arc). The
 * first one decides: a LocalSet's tasks (another scheduler) polled inside
 * a worker must not move it, nor restate the metadata at every poll. A
 * runtime known so far only by its current-thread core takes the Handle
 * as its key (or the worker joins the runtime already known by it). */
void workers_runtime_seen(struct tr_workers *ws, uint32_t w, uint64_t sched)
{
        uint8_t rt;

        if (!sched || !workers_in_use(ws, w))
                return;
        if (ws->w[w].rt != TR_RT_UNKNOWN) {
                uint8_t cur = ws->w[w].rt, known;

                if (!rt_key_is_core(ws->rt_keys[cur]) || rt_key_is_core(sched))
                        return;
                if ((known = runtime_of(ws, sched)) != TR_RT_UNKNOWN)
                        ws->w[w].rt = known;
                else
                        ws->rt_keys[cur] = sched;
                ws->changed = true;
                return;
        }
        if ((rt = runtime_add(ws, sched)) == TR_RT_UNKNOWN)
                return;
        ws->w[w].rt = rt;
        ws->changed = true;
}

void workers_list(const struct tr_workers *ws, char *buf, size_t len)
{
        size_t off = 0;
        bool first = true;

        buf[0] = 0;
        for (uint32_t i = 0; i < ws->n && off + 8 < len; i++) {
                if (!ws->w[i].used)
                        continue;
                off += (size_t)snprintf(buf + off, len - off, "%s%u", first ? "" : ",", i);
                first = false;
        }
}

/* One "runtime.<name>" entry: the workers of runtime index rt (and, for
 * main, those whose runtime is not known). Returns the new text offset. */
static size_t runtime_entry(const struct tr_workers *ws, struct tr_runtimes *out, size_t off, uint32_t rt,
                            bool is_main, uint32_t name)
{
        const char *key = out->text + off, *val;
        bool any = false;

        off += (size_t)snprintf(out->text + off, sizeof(out->text) - off, is_main ? "runtime.main" : "runtime.rt%u",
                                name) + 1;
        val = out->text + off;
        out->text[off] = 0;
        for (uint32_t i = 0; i < ws->n && off + 8 < sizeof(out->text); i++) {
                uint8_t of = ws->w[i].rt;

                if (!ws->w[i].used || !(of == rt || (is_main && of == TR_RT_UNKNOWN)))
                        continue;
                off += (size_t)snprintf(out->text + off, sizeof(out->text) - off, "%s%u", any ? "," : "", i);
                any = true;
        }
        off++;
        /* runtime.main always; a later runtime once it has a worker. */
        if (is_main || any) {
                out->key[out->n] = key;
                out->val[out->n++] = val;
        }
        return off;
}

void workers_runtimes(const struct tr_workers *ws, struct tr_runtimes *out)
{
        uint32_t main_rt = 0, name = 1;
        size_t off;

        /* main: the first runtime seen polling, not one known only by a
         * current-thread core it parked with. */
        while (main_rt < ws->n_runtimes && rt_key_is_core(ws->rt_keys[main_rt]))
                main_rt++;
        out->n = 0;
        off = runtime_entry(ws, out, 0, main_rt, true, 0);
        for (uint32_t rt = 0; rt < ws->n_runtimes && off + 64 < sizeof(out->text); rt++)
                if (rt != main_rt)
                        off = runtime_entry(ws, out, off, rt, false, name++);
}
