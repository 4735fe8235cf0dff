/* session.c: life of one traced target. Attach (plan + BPF), drain its
 * ring into the open segment, rotate by period and size, account drops,
 * end when the target exits, the deadline passes or d9ctl detaches, and
 * hand every closed segment to the sealer. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bpf/bpf_loader.h"
#include "bpf/bpf_resume.h"
#include "daemon/core/cleanup.h"
#include "daemon/core/log.h"
#include "daemon/record/attach_poll.h"
#include "daemon/record/long_poll.h"
#include "daemon/record/open_sleep.h"
#include "daemon/record/plan_child.h"
#include "daemon/record/planner.h"
#include "daemon/record/proc_facts.h"
#include "daemon/record/sampler.h"
#include "proto/d9control.h"
#include "daemon/seal/sealer.h"
#include "daemon/record/session.h"
#include "daemon/record/session_int.h"
#include "daemon/record/unwind.h"
#include "daemon/symbolize/symbolize.h"
#include "uprobes/uprobes.h"

/* The deep-copy bucket's burst: 4 deep stacks of 256 KiB at once. */
#define STACK_DEEP_BURST (1u << 20)

#define FINISHED_KEPT 64
#define RATE_WINDOW_MS 2000     /* events_per_s is over this much time */

/* The BPF objects every session shares. Loading them (the verifier:
 * 10-650 ms) happens at d9d's start; attaching and stopping a target (a
 * grace period per map-in-map insert or delete, uprobe registration) run
 * on the BPF thread (d->bpf_worker), never on the loop that drains the
 * other sessions. A load retried there writes shared_bpf before its job's
 * done; the loop reads it after. */
static struct d9_bpf *shared_bpf;
/* Plans by executable file: the next process of a planned binary attaches
 * without a planner turn (the whole of exec -> attach for auto-attach). */
#define PLAN_CACHE_FILES 8
static struct probe_plan_cache *plan_cache;

static int64_t wall_clock_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
static uint64_t next_session_id = 1;

/* Start time (field 22 of /proc/PID/stat) makes pid + starttime unique. */
static int read_proc_identity(pid_t pid, uint64_t *starttime, uid_t *uid)
{
        char path[64];
        _cleanup_free_ char *stat = NULL;
        struct stat st;
        char *p;
        unsigned long long start;

        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        stat = symbolizer_read_proc_text(path);
        if (!stat)
                return -ESRCH;
        p = strrchr(stat, ')'); /* comm may contain spaces and parentheses */
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                         &start) != 1)
                return -EIO;
        *starttime = start;
        snprintf(path, sizeof(path), "/proc/%d", pid);
        if (lstat(path, &st) < 0)
                return -ESRCH;
        *uid = st.st_uid;
        return 0;
}

static void service_from_exe(const struct d9d *d, const char *exe, char *out, size_t len)
{
        const char *base = strrchr(exe, '/');

        if (d->cfg.service[0]) {
                snprintf(out, len, "%s", d->cfg.service);
                return;
        }
        base = base ? base + 1 : exe;
        snprintf(out, len, "%.100s", *base ? base : "unknown");
        /* " (deleted)" and other oddities must not become path components. */
        for (char *c = out; *c; c++)
                if (*c == '/' || *c == ' ' || *c == '(' || *c == ')')
                        *c = '_';
}

/* Which probe set a plan kind belongs to (0: none attaches it). */
static int kind_probe_bit(enum probe_kind k)
{
        switch (k) {
        case PROBE_POLL: case PROBE_POLL_RETURN: return D9_PROBE_POLL;
        case PROBE_SPAWN: return D9_PROBE_SPAWN;
        case PROBE_COMPLETE: return D9_PROBE_TERMINATE;
        case PROBE_WAKE: return D9_PROBE_WAKE;
        case PROBE_PARK: case PROBE_UNPARK_RETURN: return D9_PROBE_PARK;
        default: return 0;
        }
}

/* The plan's points a recording of `probes` attaches, by kind; the park
 * uretprobes are left out when sched_switch ends parks. */
static void plan_attached_by_kind(const struct session *s, int probes, unsigned count[PROBE_KIND_MAX])
{
        const struct probe_plan *p = s->plan;

        memset(count, 0, PROBE_KIND_MAX * sizeof(*count));
        for (size_t i = 0; p && i < p->n_points; i++) {
                const struct probe_point *pt = &p->points[i];

                if (pt->skipped || pt->kind >= PROBE_KIND_MAX || !(probes & kind_probe_bit(pt->kind)) ||
                    (pt->kind == PROBE_UNPARK_RETURN && (probes & D9_PROBE_SCHED)))
                        continue;
                count[pt->kind]++;
        }
}

/* Are the plan's missing and skipped points worth telling for this probe
 * set? Not for one without Tokio probes (the default set): it attaches no
 * uprobe, so a missing spawn point or an optional poll return changes
 * nothing it records. */
static bool plan_gaps_told(const struct session *s)
{
        return (s->probes & TOKIO_PROBES) != 0;
}

/* Sampled wakes: on for WAKE_ON_TICKS of every WAKE_PERIOD_TICKS ticks.
 * Every wake between a D9WakeWindowEvent attached=1 and the next attached=0
 * is recorded (the points are attached before the first is written and
 * leave after the second); some just outside may be too. */
#define WAKE_ON_TICKS 1u
#define WAKE_PERIOD_TICKS 10u

/* The default set's derivations (daemon/translate.c), in plan, status and
 * the trace's metadata alike. */
#define D9_LONG_POLL_ROUTE                                                                          \
        "D9LongPollEvent from ticks every 500us of a running worker that did not sleep: a poll "     \
        "seen in one task poll frame for >= 1 ms (sampled: back-to-back polls of one future type "  \
        "without a sleep between read as one), or a worker off CPU >= 1 ms inside a poll frame "  \
        "(blocked; or preempted, with under two ticks in the poll)"
#define D9_STACK_PARK_ROUTE                                                                         \
        "sched_switch: a worker's (a thread whose stacks show its worker loop) voluntary switch-out " \
        "of >= offcpu_min outside a task poll frame, in an epoll or futex wait (other sleeps there "  \
        "are off-CPU samples only); shorter ones are only counted per target"
#define D9_ATTACH_POLL_ROUTE                                                                        \
        "every poll that starts after the uprobes attached is recorded; one running then: "          \
        "D9LongPollEvent how \"at attach\", from the 99 Hz CPU samples of a thread inside a task "   \
        "poll frame with no poll start, end or park of its own since (at least from the uprobes' "    \
        "start to its last such sample)"
#define D9_DEFAULT_NOT_RECORDED "poll start/end, spawn, terminate, wake (no uprobes attached)"

/* What feeds each dial9 event in this session: an attached probe, a
 * derivation translate really does, or nothing. */
static json_t *routes_json(const struct session *s)
{
        const struct probe_plan *p = s->plan;
        bool sched = s->probes & D9_PROBE_SCHED;
        /* Workers told by their stacks (translate.c): parks from switches
         * without a single uprobe; long polls need a runtime task's poll. */
        bool stack_workers = sched && (s->probes & D9_PROBE_RUNS) && p && probe_plan_any_poll_bodies(p);
        bool stack_long_polls = stack_workers && probe_plan_poll_bodies(p);
        bool has[PROBE_KIND_MAX] = { false };
        bool complete_by_symbols = false, wake_by_symbols = false, by_ref = false;
        char wake[160], term[200], wake_sampled[400], entry_only[240];

        for (size_t i = 0; p && i < p->n_points; i++) {
                const struct probe_point *pt = &p->points[i];

                if (pt->skipped || !(s->probes & kind_probe_bit(pt->kind)))
                        continue;
                has[pt->kind] = true;
                complete_by_symbols |= pt->kind == PROBE_COMPLETE && (pt->sources & PROBE_FROM_SYMBOLS);
                wake_by_symbols |= pt->kind == PROBE_WAKE && (pt->sources & PROBE_FROM_SYMBOLS);
                by_ref |= pt->kind == PROBE_WAKE && pt->label && strstr(pt->label, "wake_by_ref");
        }
        /* wake_by_ref is optional (single-stepped in most builds): say when
         * wakes by reference are not seen. */
        snprintf(wake, sizeof(wake), "uprobe waker::wake_by_val%s%s",
                 by_ref ? " and wake_by_ref" : " (wake_by_ref not attached: wakes by reference are not traced)",
                 wake_by_symbols ? "" : ", found through the task waker vtable");
        snprintf(entry_only, sizeof(entry_only), "uprobe raw::poll entry (plan points); each poll ends at the "
                 "thread's next poll start or park (entry-only: no probe on its return)%s",
                 p && d9_bpf_poll_end_uretprobes(p, (unsigned)s->probes) ?
                 ", a blocking-pool task's poll at its return (poll_end_uretprobe)" : "");
        snprintf(wake_sampled, sizeof(wake_sampled), "%s; sampled: attached %u ms of every %u ms (D9WakeWindowEvent "
                 "marks each window; --wakes exact records every wake)", wake, WAKE_ON_TICKS * D9D_TICK_MS,
                 WAKE_PERIOD_TICKS * D9D_TICK_MS);
        /* From the vtables, types whose complete was not singled out get none. */
        snprintf(term, sizeof(term), "uprobe Harness::complete, found as the callee of each task vtable's poll and "
                 "shutdown%s", p && p->completes_unfound ? " (not for every task type: see missing)" : "");
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}",
                "poll", !has[PROBE_POLL] ? "none" :
                        s->tr.end_at_next_poll ? entry_only : "uprobe raw::poll (plan points)",
                "long_poll", has[PROBE_POLL] && s->tr.attach_polls ? D9_ATTACH_POLL_ROUTE :
                             has[PROBE_POLL] ? "none: every poll that starts after the uprobes attached is "
                                               "recorded; one running then is not seen" :
                             stack_long_polls ? D9_LONG_POLL_ROUTE :
                             stack_workers ? "none: this build polls no runtime task (block_on and "
                                             "spawn_blocking only)" : "none",
                "spawn", has[PROBE_SPAWN] ? "uprobe OwnedTasks::bind / bind_inner; a task id no spawn probe saw "
                                            "(spawned before the attach, or where both are inlined) at its first poll" :
                         has[PROBE_POLL] && (s->probes & D9_PROBE_SPAWN) ? "first poll of a new task id" : "none",
                "terminate", !has[PROBE_COMPLETE] ? "none" : complete_by_symbols ? "uprobe Harness::complete" : term,
                "wake", !has[PROBE_WAKE] ? "none" : s->wakes_sampled ? wake_sampled : wake,
                "park", has[PROBE_PARK] ? "uprobe worker park function" :
                        sched && has[PROBE_POLL] ? "sched_switch: worker switch-out with no poll open, in an "
                                                   "epoll or futex wait" :
                        stack_workers ? D9_STACK_PARK_ROUTE : "none",
                "unpark", has[PROBE_PARK] && sched ? "sched_switch: the parked worker's switch-in after it slept "
                                                     "(no uretprobe), else its next poll or park" :
                          has[PROBE_PARK] ? "uretprobe worker park function" :
                          sched && (has[PROBE_POLL] || stack_workers) ? "sched_switch: that worker's switch-in" : "none",
                "blocking_pool", has[PROBE_POLL] ? "D9BlockingPollEvent: polls of blocking_task vtables" : "none");
}

static json_t *plan_to_json(const struct session *s)
{
        json_t *j = json_object(), *attached = json_object(), *missing = json_array(), *skipped = json_array();
        const struct probe_plan *p = s->plan;
        char probes[96];

        d9c_format_probes(s->probes, probes, sizeof(probes));
        json_object_set_new(j, "probes", json_string(probes));
        json_object_set_new(j, "attached", attached);
        json_object_set_new(j, "missing", missing);
        json_object_set_new(j, "skipped", skipped);
        if (s->probes & (D9_PROBE_SCHED))
                json_object_set_new(attached, "sched_switch", json_integer(1));
        if (s->probes & (D9_PROBE_CPU))
                json_object_set_new(attached, "cpu_sampling", json_integer(1));
        if (session_run_ticks_on(s))
                json_object_set_new(attached, "run_sampling", json_integer(1));
        if (!(s->probes & TOKIO_PROBES))
                json_object_set_new(j, "not_recorded", json_string(D9_DEFAULT_NOT_RECORDED));
        /* Recording before the plan (session_late.c): what joins when. */
        if (s->plan_pending)
                json_object_set_new(j, "pending", json_string(s->probes & TOKIO_PROBES ?
                        "the probe plan is being built: the uprobes attach when it is ready (the trace's "
                        "D9ProbesEvent says when); records meanwhile are held and translated with it" :
                        "the probe plan is being built: records are held until it is ready, then translated "
                        "with it (workers and long polls by stack)"));
        else if (s->late && (s->probes & TOKIO_PROBES))
                json_object_set_new(j, "pending", json_string("the plan's uprobes are being attached (the trace's "
                                                              "D9ProbesEvent says when they are)"));
        if (s->plan_error[0])
                json_object_set_new(j, "plan_error", json_string(s->plan_error));
        if (s->full_on_stall_ms) {
                char fos[384];

                snprintf(fos, sizeof(fos), "after a poll of >= %llu ms, the full set's uprobes for %llu ms, then "
                         "none for %llu ms%s%s", (unsigned long long)s->full_on_stall_ms,
                         (unsigned long long)s->d->cfg.full_window_ms, (unsigned long long)s->d->cfg.full_window_gap_ms,
                         s->win_error[0] ? ": " : "", s->win_error);
                json_object_set_new(j, "full_on_stall", json_string(fos));
        }
        if (!p)
                return j;
        json_object_set_new(j, "exe", json_string(p->exe_path ? p->exe_path : ""));
        if (p->build_id)
                json_object_set_new(j, "build_id", json_string(p->build_id));
        if (p->tokio_version)
                json_object_set_new(j, "tokio_version", json_string(p->tokio_version));
        if (p->shape)
                json_object_set_new(j, "shape", json_string(p->shape));
        for (size_t i = 0; i < p->n_points && plan_gaps_told(s); i++) {
                const struct probe_point *pt = &p->points[i];

                if (pt->skipped)
                        json_array_append_new(skipped, json_pack("{s:s,s:s,s:s}", "kind", probe_kind_name(pt->kind),
                                "label", pt->label ? pt->label : "", "reason", pt->skip_reason ? pt->skip_reason : ""));
        }
        unsigned count[PROBE_KIND_MAX];

        plan_attached_by_kind(s, s->probes, count);
        for (int k = 1; k < PROBE_KIND_MAX; k++)
                if (count[k])
                        json_object_set_new(attached, probe_kind_name((enum probe_kind)k), json_integer(count[k]));
        /* Without park points a poll ends by a uretprobe on it, with them a
         * blocking-pool job: probes uprobes_attached counts too. */
        size_t rets = d9_bpf_poll_end_uretprobes(p, (unsigned)s->probes);
        if (rets)
                json_object_set_new(attached, "poll_end_uretprobe", json_integer((json_int_t)rets));
        for (size_t i = 0; i < p->n_missing; i++)
                if (plan_gaps_told(s))
                        json_array_append_new(missing, json_pack("{s:s,s:s}", "kind", probe_kind_name(p->missing[i].kind),
                                                         "reason", p->missing[i].reason ? p->missing[i].reason : ""));
        /* The default set blind to this build: say so, and what sees it. */
        if ((s->probes & D9_PROBE_RUNS) && !probe_plan_poll_bodies(p))
                json_array_append_new(missing, json_pack("{s:s,s:s}", "kind", "longpoll", "reason",
                        probe_plan_any_poll_bodies(p) && !probe_plan_task_polls(p) ?
                        "this build polls blocking-pool tasks only (block_on and spawn_blocking, no runtime "
                        "task): there is no task poll to be long; workers and parks come from stacks, "
                        "--probes all records the jobs" :
                        "no poll function body is known in this build (no symbol sizes, no .eh_frame_hdr, "
                        "the code sweep found no end): without uprobes no worker, park or long poll is seen; "
                        "--probes all records them"));
        json_object_set_new(j, "routes", routes_json(s));
        /* Not while the BPF thread changes the target's links. */
        if (s->bpf && !s->late && !session_bpf_busy(s))
                json_object_set_new(j, "uprobes_attached", json_integer((json_int_t)d9_bpf_target_n_attached(s->bpf)));
        return j;
}

struct session_meta {
        char pid[24], start[24], rec[48], probes[96], plan[512], hz[16], ns_pid[16], res_ms[24], acc_ms[24], uprobes[96], fos[192];
        char by_thread[24];
        struct tr_runtimes runtimes;
        struct d9_kv kv[34 + TR_MAX_RUNTIMES];   /* every key below at most once, each runtime one */
        uint32_t n;
};

/* SegmentMetadataEvent entries (design.md §4). */
static void session_meta_build(const struct session *s, struct session_meta *m)
{
        const struct probe_plan *p = s->plan;

        snprintf(m->pid, sizeof(m->pid), "%d", s->pid);
        snprintf(m->start, sizeof(m->start), "%llu", (unsigned long long)s->starttime);
        d9c_format_probes(s->probes, m->probes, sizeof(m->probes));
        translate_runtimes(&s->tr, &m->runtimes);
        m->n = 0;
        m->kv[m->n++] = (struct d9_kv){ "service", s->service };
        m->kv[m->n++] = (struct d9_kv){ "host", s->d->host };
        m->kv[m->n++] = (struct d9_kv){ "pid", m->pid };
        m->kv[m->n++] = (struct d9_kv){ "start_time", m->start };
        /* One recording's segments continue each other (d9ctl report). */
        snprintf(m->rec, sizeof(m->rec), "%lld-%llu", (long long)s->started_unix_ms, (unsigned long long)s->id);
        m->kv[m->n++] = (struct d9_kv){ "recording", m->rec };
        m->kv[m->n++] = (struct d9_kv){ "exe", s->exe };
        /* Containers: the pid it knows itself by, and where it runs. */
        snprintf(m->ns_pid, sizeof(m->ns_pid), "%d", (int)s->nspid);
        m->kv[m->n++] = (struct d9_kv){ "ns_pid", m->ns_pid };
        m->kv[m->n++] = (struct d9_kv){ "nspid", s->pid_chain };
        if (s->cgroup[0])
                m->kv[m->n++] = (struct d9_kv){ "cgroup", s->cgroup };
        if (s->rule[0])
                m->kv[m->n++] = (struct d9_kv){ "attach_rule", s->rule };
        m->kv[m->n++] = (struct d9_kv){ "probes", m->probes };
        if (s->probes & D9_PROBE_CPU) {
                /* what one on-CPU sample stands for (export's pprof period) */
                snprintf(m->hz, sizeof(m->hz), "%u", s->d->cfg.sample_hz);
                m->kv[m->n++] = (struct d9_kv){ "cpu_sample_hz", m->hz };
        }
        if (!(s->probes & TOKIO_PROBES))
                m->kv[m->n++] = (struct d9_kv){ "not_recorded", D9_DEFAULT_NOT_RECORDED };
        if (session_run_ticks_on(s))
                m->kv[m->n++] = (struct d9_kv){ "long_polls", D9_LONG_POLL_ROUTE };
        else if (s->tr.attach_polls)
                m->kv[m->n++] = (struct d9_kv){ "long_polls", D9_ATTACH_POLL_ROUTE };
        if (s->wakes_sampled)
                m->kv[m->n++] = (struct d9_kv){ "wakes", "sampled: see D9WakeWindowEvent (attached, on_ms, period_ms)" };
        if (s->tr.stall_ns) {
                snprintf(m->fos, sizeof(m->fos), "the full set's uprobes for %llu ms after a poll of >= %llu ms, then "
                         "none for %llu ms (D9ProbesEvent marks each window)",
                         (unsigned long long)s->d->cfg.full_window_ms, (unsigned long long)s->full_on_stall_ms,
                         (unsigned long long)s->d->cfg.full_window_gap_ms);
                m->kv[m->n++] = (struct d9_kv){ "full_on_stall", m->fos };
        }
        if (s->plan_pending)
                m->kv[m->n++] = (struct d9_kv){ "probe_plan", "pending: being built while this records (D9ProbesEvent)" };
        else if (!p && s->plan_error[0])
                m->kv[m->n++] = (struct d9_kv){ "probe_plan", s->plan_error };
        if (s->uprobes_ms >= 0 && (s->probes & TOKIO_PROBES)) {
                snprintf(m->uprobes, sizeof(m->uprobes), "attached %lld ms after the recording began (D9ProbesEvent)",
                         (long long)s->uprobes_ms);
                m->kv[m->n++] = (struct d9_kv){ "uprobes", m->uprobes };
        } else if (s->late && (s->probes & TOKIO_PROBES)) {
                m->kv[m->n++] = (struct d9_kv){ "uprobes", "not yet attached (D9ProbesEvent attached=1 when they are)" };
        }
        if (p) {
                /* The points this probe set attaches, by kind:
                 * "poll=28,complete=26,..."; the default set attaches none,
                 * but for its full-detail windows if it has them. */
                bool windows = s->tr.stall_ns != 0;
                unsigned count[PROBE_KIND_MAX];
                size_t off = 0;

                plan_attached_by_kind(s, windows ? s->probes | TOKIO_PROBES : s->probes, count);
                m->plan[0] = 0;
                if (windows)
                        off = (size_t)snprintf(m->plan, sizeof(m->plan), "in full-detail windows: ");
                for (int k = 1; k < PROBE_KIND_MAX && off < sizeof(m->plan); k++)
                        if (count[k])
                                off += (size_t)snprintf(m->plan + off, sizeof(m->plan) - off, "%s%s=%u",
                                                        off && m->plan[off - 1] != ' ' ? "," : "",
                                                        probe_kind_name((enum probe_kind)k), count[k]);
                if (!m->plan[0])
                        snprintf(m->plan, sizeof(m->plan), "no uprobe in probes %s", m->probes);
                m->kv[m->n++] = (struct d9_kv){ "probe_plan", m->plan };
        }
        /* The sampling periods of the resource and accept-queue events. */
        if (s->resources_every_ms) {
                snprintf(m->res_ms, sizeof(m->res_ms), "%llu", (unsigned long long)s->resources_every_ms);
                m->kv[m->n++] = (struct d9_kv){ "resources_interval_ms", m->res_ms };
        }
        if (s->accept_queues) {
                snprintf(m->acc_ms, sizeof(m->acc_ms), "%llu", (unsigned long long)s->d->cfg.accept_queues_every_ms);
                m->kv[m->n++] = (struct d9_kv){ "accept_queues_interval_ms", m->acc_ms };
        }
        /* Worker ids that are a thread's, not Tokio's index: the report
         * says what that means for its rows (restated as ids appear). */
        if (s->tr.ids_by_thread) {
                snprintf(m->by_thread, sizeof(m->by_thread), "%llu", (unsigned long long)s->tr.ids_by_thread);
                m->kv[m->n++] = (struct d9_kv){ "worker_ids_by_thread", m->by_thread };
        }
        m->kv[m->n++] = (struct d9_kv){ "d9d_version", D9_VERSION };
        /* dial9's runtime.<name>: each runtime's worker ids. */
        for (uint32_t i = 0; i < m->runtimes.n; i++)
                m->kv[m->n++] = (struct d9_kv){ m->runtimes.key[i], m->runtimes.val[i] };
        if (p && p->build_id)
                m->kv[m->n++] = (struct d9_kv){ "build_id", p->build_id };
        if (p && p->tokio_version)
                m->kv[m->n++] = (struct d9_kv){ "tokio_version", p->tokio_version };
        if (p && p->shape)
                m->kv[m->n++] = (struct d9_kv){ "tokio_shape", p->shape };
}

/* Why the open segment is full ("size", "events") or NULL: by bytes, or by
 * events, as dial9's viewer holds every event of a file in
 * memory, and past about max_segment_events it takes longer than a user
 * waits (docs/daemon.md, "Segment size"). */
static const char *session_segment_full(const struct session *s)
{
        uint64_t max_events = s->d->cfg.max_segment_events;

        if (segment_size(&s->seg) >= s->d->cfg.max_segment_bytes)
                return "size";
        if (max_events && s->tr.events - s->seg_first_event >= max_events)
                return "events";
        return NULL;
}

static int session_open_segment(struct session *s)
{
        struct session_meta m;
        int r;

        session_meta_build(s, &m);
        r = segment_open(&s->seg, m.kv, m.n);
        if (r < 0) {
                log_error("pid %d: cannot open segment in %s: %s", s->pid, s->seg.dir, strerror(-r));
                return r;
        }
        s->tr.ws.changed = false;
        s->seg_first_event = s->tr.events;
        if (!s->tr.recording_start_ts)
                s->tr.recording_start_ts = d9_now_ns();
        r = translate_set_encoder(&s->tr, s->seg.enc);
        /* Each segment restates whether its wakes are being recorded. */
        if (r == 0 && s->wakes_sampled && s->bpf && !s->late)
                r = translate_wake_window(&s->tr, d9_now_ns(), d9_bpf_target_wakes_on(s->bpf),
                                          WAKE_ON_TICKS * D9D_TICK_MS, WAKE_PERIOD_TICKS * D9D_TICK_MS);
        if (r == 0)
                r = session_samples_restate(s, d9_now_ns());
        return r;
}

/* New workers showed up: restate the metadata (runtime.<name>) in the same
 * segment, as dial9 does, in a stream of its own followed by a clock sync. */
int session_refresh_metadata(struct session *s)
{
        struct session_meta m;
        int r;

        session_meta_build(s, &m);
        s->tr.ws.changed = false;
        r = d9_enc_new_stream(s->seg.enc);
        if (!r)
                r = d9_enc_segment_metadata(s->seg.enc, d9_now_ns(), m.kv, m.n);
        if (!r)
                r = segment_clock_sync(s->seg.enc);
        if (!r)
                r = d9_enc_new_stream(s->seg.enc);
        return r;
}

/* The target's mappings are kept (once it has exited they cannot be read,
 * and the sealer needs them to name the addresses of its last segment) and
 * read off the drain loop: a read of /proc/PID/maps waits on the target's
 * mmap lock, which the target can hold. The BPF thread reads them at the
 * attach and at a stop, the sampler every MAPS_EVERY_MS in between
 * (session_on_sample); a segment closed takes the last one read. */
void session_take_maps(struct session *s, char *maps)
{
        /* After the end: its last segment's seal job holds its own copy. */
        if (!maps || s->state != SESSION_RECORDING) {
                free(maps);
                return;
        }
        free(s->maps);
        s->maps = maps;
        session_exe_map_update(s);
}

/* Where the executable is mapped, from the last map read and the plan's
 * PT_LOAD headers, for translate to name boxed futures by: parsed here,
 * where the map lands (the loop, or the BPF thread at the attach, before
 * translate runs), so translate itself reads nothing. */
void session_exe_map_update(struct session *s)
{
        struct exe_map m;

        /* tr.enc: translate is running (initialized, not yet released). */
        if (!s->plan || !s->tr.enc)
                return;
        exe_map_from_maps(s->maps, s->mapped_exe, s->plan->segments, s->plan->n_segments, &m);
        translate_set_exe_map(&s->tr, &m);
}

/* The map read just after the segment closed (its session, if still
 * there, keeps it too), or NULL: the job keeps the last one read. */
static void session_seal_with_maps(struct d9d *d, void *ctx, char *maps)
{
        struct seal_job *job = ctx;

        if (maps) {
                for (struct session *s = d->sessions; s; s = s->next)
                        if (s->id == job->session_id)
                                session_take_maps(s, strdup(maps));
                free(job->maps);
                job->maps = maps;
        }
        sealer_submit(d->sealer, job);
}

/* Close the open segment and queue it for sealing, by way of the
 * sampler, which reads the target's map as it is now (off the loop). */
static void session_close_segment(struct session *s)
{
        struct seal_job *job;
        int r;

        /* A long poll still running is written into the segment it is in,
         * and so is a poll end its task's start elsewhere decided. */
        if (s->tr.enc) {
                long_poll_flush(&s->tr, true);
                attach_poll_flush(&s->tr);
                translate_settle_poll_ends(&s->tr, true);
        }
        job = calloc(1, sizeof(*job));

        if (!job)
                return;
        /* Workers seen since the last tick (a target that exits within a
         * second of starting its runtime) still get their names into this
         * segment: the refresh otherwise waits for the next tick. */
        if (s->tr.ws.changed && s->seg.enc && session_refresh_metadata(s) < 0)
                log_warn("pid %d: worker names not restated in %s", s->pid, s->seg.dir);
        job->index = s->seg.index;
        r = segment_close(&s->seg, job->active, sizeof(job->active));
        if (r == -ENOENT) {
                free(job);
                return;
        }
        if (r < 0)
                log_error("pid %d: %s ended with a write error: %s", s->pid, job->active, strerror(-r));
        s->tr.enc = NULL;
        job->maps = s->maps ? strdup(s->maps) : NULL;
        /* The sealer opens the target's files in this root, taken while
         * the pidfd was valid: never through /proc/PID, which may be
         * another process by the time the segment is sealed. */
        job->root_fd = s->root_fd >= 0 ? fcntl(s->root_fd, F_DUPFD_CLOEXEC, 3) : -1;
        job->compression = s->d->cfg.compression;
        job->session_id = s->id;
        job->reader_uid = s->starter_uid;
        job->target_nspid = s->nspid;
        job->target_uid = s->uid;
        /* The folder segment_writer_init was given, spelled as fields. */
        snprintf(job->service, sizeof(job->service), "%s", s->service);
        job->pid = s->pid;
        job->starttime = s->starttime;
        s->segments_pending++;
        if (s->d->sampler)
                sampler_read_maps_then(s->d->sampler, s->proc_fd, s->pidfd_w.fd, session_seal_with_maps, job);
        else
                sealer_submit(s->d->sealer, job);
}

static void session_rotate(struct session *s, const char *why)
{
        log_info("pid %d: rotating segment %u (%s)", s->pid, s->seg.index, why);
        session_close_segment(s);
        if (session_open_segment(s) < 0)
                session_end(s, "cannot open a new segment");
}

static int read_sysctl(const char *path)
{
        _cleanup_free_ char *text = symbolizer_read_proc_text(path);

        return text ? atoi(text) : 2;
}

/* Whether the uid that reads this session's traces may see kernel
 * addresses: the test /proc/kallsyms applies (kallsyms_show_value). Root
 * unless kptr_restrict is 2; anyone else only with kptr_restrict 0 and
 * perf_event_paranoid <= 1 (no capabilities are assumed for them). */
static bool kernel_addresses_visible(uid_t reader)
{
        int kptr = read_sysctl("/proc/sys/kernel/kptr_restrict");

        if (reader == 0)
                return kptr < 2;
        return kptr == 0 && read_sysctl("/proc/sys/kernel/perf_event_paranoid") <= 1;
}

/* The credential lines of /proc/PID/status (ids, groups, capability sets). */
static char *read_creds(int status_fd)
{
        char buf[8192], *out = NULL, *line, *save = NULL;
        size_t len = 0;
        ssize_t n = pread(status_fd, buf, sizeof(buf) - 1, 0);
        FILE *f;

        if (n <= 0)
                return NULL;
        buf[n] = 0;
        f = open_memstream(&out, &len);
        if (!f)
                return NULL;
        for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
                if (!strncmp(line, "Uid:", 4) || !strncmp(line, "Gid:", 4) || !strncmp(line, "Groups:", 7) ||
                    !strncmp(line, "Cap", 3) || !strncmp(line, "NoNewPrivs:", 11))
                        fprintf(f, "%s\n", line);
        fclose(f);
        return out;
}

/* The rule perf and ptrace follow: a peer other than root traces a process
 * only while it runs with the credentials it had at attach. A setuid, setgid
 * or file-capabilities exec (or any credential change) ends the session. */
static bool session_gained_privileges(struct session *s)
{
        _cleanup_free_ char *now = NULL;

        if (s->status_fd < 0 || s->privileged)
                return s->privileged;
        now = read_creds(s->status_fd);
        /* Unreadable: exited (the pidfd ends the session) or now beyond us. */
        if (now && s->creds && !strcmp(now, s->creds))
                return false;
        if (!now && d9_pidfd_alive(s->pidfd_w.fd) < 0)
                return false;
        s->privileged = true;
        return true;
}

bool session_sample_allowed(struct session *s)
{
        return !session_gained_privileges(s);
}

/* translate's want_maps: a pc outside every module the unwinder knows;
 * the sampler reads the map (and opens its files) now, off the loop. */
static void session_want_maps(void *ctx)
{
        struct session *s = ctx;

        sampler_maps_soon(s->d->sampler, s->id);
}

/* translate's deep_thread: the session's BPF target learns the thread. */
static int session_deep_thread(void *ctx, uint32_t tid)
{
        struct session *s = ctx;

        return s->bpf ? d9_bpf_target_stack_deep(s->bpf, tid) : -ENOENT;
}

int session_record(void *ctx, const void *rec, size_t size)
{
        struct session *s = ctx;
        uint64_t execs = s->tr.exec_seen + s->tr.exec_planned;

        if (s->privileged) {
                s->discarded++;
                return 0;
        }
        /* Translating needs the plan (workers and long polls by stack, the
         * task labels): kept in order until it lands. */
        if (s->plan_pending && !s->in_replay) {
                session_late_hold(s, rec, size);
                return 0;
        }
        if (!s->tr.enc)
                return 0;
        translate_record(&s->tr, rec, size);
        /* After an exec nothing more is recorded until the credentials are
         * checked again (a negative return stops this drain). */
        if (s->tr.exec_seen + s->tr.exec_planned != execs && session_gained_privileges(s))
                return -1;
        /* A new program: its map soon (record -- attaches before the exec). */
        if (s->tr.exec_seen + s->tr.exec_planned != execs && s->d->sampler)
                sampler_maps_soon(s->d->sampler, s->id);
        if (!s->timeline.first_event && s->timeline.exec && size >= sizeof(struct d9_rec_hdr))
                s->timeline.first_event = ((const struct d9_rec_hdr *)rec)->ts;
        return 0;
}

void session_end_privileged(struct session *s)
{
        log_warn("pid %d: gained privileges (setuid/setgid/capabilities exec or credential change); "
                 "session of uid %u ended", s->pid, (unsigned)s->starter_uid);
        session_end(s, "target gained privileges (setuid/setgid/capabilities exec or credential change)");
}

/* Drains the ring unless the target gained privileges the starter lacks,
 * in which case the session ends unread. False: nothing more to do. */
static void session_drain_count(struct session *s, bool woken)
{
        struct ring_drains *dr = &s->drains;
        size_t size, pending = d9_bpf_target_pending(s->bpf, &size);
        uint64_t now = d9_now_ns();

        dr->woken += woken;
        dr->timer += !woken;
        dr->ring_bytes = size;
        if (pending > dr->fill_max)
                dr->fill_max = pending;
        if (dr->last_ns && now - dr->last_ns > dr->gap_max_ns)
                dr->gap_max_ns = now - dr->last_ns;
        dr->last_ns = now;
}

static bool session_drain_while_permitted(struct session *s, bool woken)
{
        if (s->state != SESSION_RECORDING)
                return false;
        session_drain_count(s, woken);
        if (!session_gained_privileges(s))
                d9_bpf_target_consume(s->bpf);
        if (s->privileged) {
                session_end_privileged(s);
                return false;
        }
        return true;
}

void session_drain_now(struct session *s)
{
        (void)session_drain_while_permitted(s, false);
}

static void session_on_ring(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct session *s = (struct session *)((char *)w - offsetof(struct session, ring_w));
        const char *full;

        if (!session_drain_while_permitted(s, true))
                return;
        session_late_replay_step(s);
        if (s->tr.error) {
                log_error("pid %d: encoding failed: %s", s->pid, strerror(-s->tr.error));
                session_end(s, "encoder error");
                return;
        }
        if (s->tr.exited)
                session_end(s, "target exited");
        else if (s->tr.exec_seen > (s->expect_exec ? 1u : 0u))
                session_end(s, "target called exec: its probes are gone");
        else if ((full = session_segment_full(s)))
                session_rotate(s, full);
}

static void session_on_pidfd(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct session *s = (struct session *)((char *)w - offsetof(struct session, pidfd_w));

        if (s->state == SESSION_RECORDING)
                session_end(s, "target exited");
}

/* At d9d's start (before any job runs), so the first attach finds the
 * programs loaded; on the BPF thread, an attach after a failed load tries
 * again. */
int session_bpf_load(struct d9d *d)
{
        struct d9_bpf_opts bo = { .sample_hz = d->cfg.sample_hz, .ring_bytes = d->cfg.ring_bytes };
        struct d9_bpf *b;
        int r;

        if (__atomic_load_n(&shared_bpf, __ATOMIC_ACQUIRE))
                return 0;
        r = d9_bpf_open(&bo, &b);
        if (r < 0)
                return r;
        log_info("BPF programs loaded (uprobe_multi: %s; off-CPU user stacks: %s)",
                 d9_bpf_uses_uprobe_multi(b) ? "yes" : "no", d9_bpf_resume_why());
        __atomic_store_n(&shared_bpf, b, __ATOMIC_RELEASE);
        return 0;
}

/* On the BPF thread, once planned: the target's ring, config and
 * uprobes. Its records wait in the ring until the loop drains it. */
void session_bpf_opts(struct session *s, struct d9_bpf_target_opts *out)
{
        struct d9_bpf_target_opts to = {
                .probes = (unsigned)s->probes,
                /* Task-id layout: 0 = the plan's (uprobes reads it from the binary). */
                /* Stacks for CPU samples and for every recorded off-CPU
                 * interval (offcpu_min and longer), at most 500/s per thread,
                 * unwound in translate.c; a sample without one says why
                 * (docs/stacks.md, "Samples without a stack"). */
                .stack = {
                        .flags = (s->probes & (D9_PROBE_CPU | D9_PROBE_RUNS) ? D9_STACK_CPU : 0) |
                                 (s->probes & D9_PROBE_SCHED ? D9_STACK_OFFCPU : 0),
                        .user_bytes = D9_STACK_USER_BYTES, .offcpu_min_us = (uint32_t)s->offcpu_min_us,
                        .offcpu_per_sec = 500, .offcpu_burst = 100,
                        /* A deeper stack whole, up to 256 KiB, within the
                         * byte rate (docs/stacks.md, "Deep stacks"); at most
                         * a quarter of a small ring. */
                        .deep_bytes = (uint32_t)(s->d->cfg.ring_bytes / 4 < D9_STACK_DEEP_MAX
                                                         ? s->d->cfg.ring_bytes / 4 : D9_STACK_DEEP_MAX),
                        .deep_per_sec = (uint32_t)s->d->cfg.stack_deep_rate,
                        .deep_burst = STACK_DEEP_BURST,
                },
                .offcpu_min_ns = s->offcpu_min_us * 1000,
                .wakes_switchable = s->wakes_sampled,
                /* One trap per park: the uretprobe on the park function cost
                 * as much as a poll start (docs/performance.md). */
                .unpark_at_resume = (s->probes & D9_PROBE_SCHED) != 0,
                /* The plan is still being built: the uprobes join later. */
                .uprobes_later = s->plan_pending,
                .run_ticks_off = (s->probes & D9_PROBE_RUNS) && !session_run_ticks_on(s),
                .on_record = session_record,
                .ctx = s,
        };

        *out = to;
}

static int session_install_bpf(struct session *s, char **why)
{
        struct d9_bpf_target_opts to;
        int r;

        session_bpf_opts(s, &to);
        /* An executable without CFI (frame pointers, .eh_frame stripped) is
         * unwound by frame pointer (daemon/record/unwind_step.c); BPF then also
         * follows rbp past the copy, for frames deeper than it. */
        if (to.stack.flags && to.stack.deep_per_sec)
                to.stack.flags |= D9_STACK_DEEP;
        if (to.stack.flags && unwind_exe_has_cfi(s->pid) == 0) {
                to.stack.flags |= D9_STACK_FP_TAIL;
                log_info("pid %d: its executable has no CFI: stacks by frame pointer", s->pid);
        }
        r = session_bpf_load(s->d);
        if (r < 0) {
                *why = d9_strdupf("cannot load d9's BPF programs: %s (see d9d's preflight log)", strerror(-r));
                return r;
        }
        r = d9_bpf_attach_target(shared_bpf, s->pid, s->plan, &to, &s->bpf, why);
        if (r < 0) {
                if (!*why)
                        *why = d9_strdupf("cannot attach to pid %d: %s", s->pid, strerror(-r));
                return r;
        }
        if (d9_pidfd_alive(s->pidfd_w.fd) < 0) {
                /* Exited during the attach: the PID filter could now match a
                 * process that is not the one checked. */
                *why = d9_strdupf("pid %d exited while being attached", s->pid);
                return -ESRCH;
        }
        return 0;
}

/* Back on the loop: drain the ring installed above. */
static int session_watch_ring(struct session *s)
{
        s->ring_w.fd = d9_bpf_target_epoll_fd(s->bpf);
        s->ring_w.fn = session_on_ring;
        return d9d_watch_add(s->d, &s->ring_w, EPOLLIN);
}

/* The file the target has open as fd (d9ctl record: the command's
 * executable, opened by the user's own process with the user's rights),
 * reopened through /proc/PID/fd/N; the pidfd check after the open makes sure
 * that PID still is the target. Returns an fd or a negative errno. */
static int open_target_fd(struct session *s, int fd_in_target)
{
        char path[64];
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/fd/%d", s->pid, fd_in_target);
        /* O_PATH first: a device or FIFO the target holds is never opened. */
        fd = open(path, O_PATH | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        fd = d9_target_file_reopen(fd);
        if (fd < 0)
                return fd;
        if (d9_pidfd_alive(s->pidfd_w.fd) < 0) {
                close(fd);
                return -ESRCH;
        }
        return fd;
}

/* The executable to plan, open: fd and its display name (malloc'd). */
static int session_plan_file(struct session *s, const struct session_request *req, char **display, char **why)
{
        int fd;

        if (req->exe_fd >= 0) {
                fd = open_target_fd(s, req->exe_fd);
                if (fd == -EBADFD)
                        *why = d9_strdupf("fd %d of pid %d is not a regular file", req->exe_fd, s->pid);
                else if (fd < 0)
                        *why = d9_strdupf("cannot read fd %d of pid %d: %s", req->exe_fd, s->pid, strerror(-fd));
                else if (!(*display = strdup(s->exe))) {
                        close(fd);
                        fd = -ENOMEM;
                }
                return fd;
        }
        if (req->exe)
                return probe_target_file_open(req->exe, display, why);
        return probe_target_exe_open(s->pidfd_w.fd, s->pid, display, why);
}

/* On the planner thread: the plan is built by a child process (plan_child.h). */
static int session_plan(struct session *s, const struct session_request *req, char **why)
{
        _cleanup_free_ char *display = NULL, *err = NULL;
        _cleanup_close_ int fd = -1;
        char root[64] = "";
        int r;
        bool of_pid = !req->exe && req->exe_fd < 0;

        /* Long polls need the plan's poll functions: like the Tokio
         * probes, the default set is for Tokio processes. */
        if (!(s->probes & PLANNED_PROBES))
                return 0;
        fd = session_plan_file(s, req, &display, &err);
        if (fd < 0) {
                *why = err ? strdup(err) : d9_strdupf("no probe plan for pid %d: %s", s->pid, strerror(-fd));
                return fd;
        }
        if (of_pid)
                snprintf(root, sizeof(root), "/proc/%d/root", s->pid);
        r = planner_child_build(fd, display, root, s->d->cfg.plan_timeout_ms, planner_abort_fd(s->d->planner), &s->plan,
                             &err);
        if (r < 0)
                *why = !err ? d9_strdupf("no probe plan for pid %d: %s", s->pid, strerror(-r))
                       : of_pid ? d9_strdupf("PID %d: %s", s->pid, err) : strdup(err);
        return r;
}

static void session_link(struct d9d *d, struct session *s)
{
        s->next = d->sessions;
        d->sessions = s;
}

/* What only recording needs, at its end: a finished session stays listed
 * (FINISHED_KEPT of them) and kept its plan (with the executable open and
 * the tables that name futures), maps and buffers, 0.7 MB and an fd each on
 * a big binary. Status reads plan_json, built while it recorded; the last
 * segment's seal job has its own copies. */
static void session_release_recording(struct session *s)
{
        if (s->plan) {
                probe_plan_free(s->plan);
                s->plan = NULL;
                s->had_plan = true;
        }
        free(s->maps);
        s->maps = NULL;
        unwind_maps_free(s->unw_maps);
        s->unw_maps = NULL;
        free(s->mapped_exe);
        s->mapped_exe = NULL;
        record_hold_free(&s->hold);
        segment_writer_destroy(&s->seg);
}

static void session_free(struct session *s)
{
        open_sleeps_free(s->open_sleeps);
        if (s->bpf)
                d9_bpf_detach_target(s->bpf);
        if (s->pidfd_w.fd >= 0)
                close(s->pidfd_w.fd);
        if (s->status_fd >= 0)
                close(s->status_fd);
        if (s->root_fd >= 0)
                close(s->root_fd);
        if (s->proc_fd >= 0)
                close(s->proc_fd);
        free(s->creds);
        session_release_recording(s);
        translate_destroy(&s->tr);
        json_decref(s->plan_json);
        json_decref(s->sealed_paths);
        free(s);
}

/* An attach between its checks on the loop and its BPF attach: its plan is
 * built by the planner thread meanwhile. */
struct session_start {
        struct plan_job job;            /* first: the planner hands this back */
        struct session *s;              /* checked, not linked yet */
        struct session_request req;     /* req.exe points to exe_copy */
        char *exe_copy;
        int r;                          /* the plan's result, with why */
        char *why;
        void (*done)(void *ctx, struct session *s, const char *why);
        void *ctx;
        bool installing;                /* job is in d->bpf_worker's queue, not the planner's */
        bool planned;                   /* by the planner, not from plan_cache */
        struct session_start *next;
};

static struct session_start *starting;

static void starting_unlink(struct session_start *st)
{
        struct session_start **pp = &starting;

        while (*pp && *pp != st)
                pp = &(*pp)->next;
        if (*pp)
                *pp = st->next;
}

/* Whether pid has a live or starting session; *starter is whose. */
static bool pid_taken(struct d9d *d, pid_t pid, uid_t *starter)
{
        struct session *s = session_find(d, pid, true);

        if (s) {
                *starter = s->starter_uid;
                return true;
        }
        for (struct session_start *st = starting; st; st = st->next) {
                if (st->s->pid == pid) {
                        *starter = st->s->starter_uid;
                        return true;
                }
        }
        return false;
}

/* One answer for every process a peer may not trace: another uid's, or one
 * a session the peer cannot see already traces, so the answer tells
 * nothing about other users' sessions. */
static char *not_yours(const struct session_request *req)
{
        return d9_strdupf("permission denied: uid %u may not trace pid %d", (unsigned)req->peer_uid, req->pid);
}

static struct session *session_new(struct d9d *d, const struct session_request *req)
{
        struct session *s = calloc(1, sizeof(*s));

        if (!s)
                return NULL;
        s->d = d;
        s->pid = req->pid;
        s->pidfd_w.fd = -1;
        s->status_fd = -1;
        s->root_fd = -1;
        s->proc_fd = -1;
        s->seg.fd = -1;
        s->resources_every_ms = req->resources_every_ms >= 0 ? (uint64_t)req->resources_every_ms
                                                              : d->cfg.resources_every_ms;
        s->accept_queues = req->accept_queues;
        s->probes = req->probes;
        s->offcpu_min_us = req->offcpu_min_us >= 0 ? (uint64_t)req->offcpu_min_us : d->cfg.offcpu_min_us;
        s->wakes_sampled = (req->probes & D9_PROBE_WAKE) && !req->wakes_exact;
        s->expect_exec = req->exe != NULL || req->exe_fd >= 0;
        s->starter_uid = req->peer_uid;
        snprintf(s->rule, sizeof(s->rule), "%s", req->rule ? req->rule : "");
        s->exec_to_attach_ms = -1;
        s->plan_ms = s->uprobes_ms = -1;
        s->full_on_stall_ms = req->full_on_stall_ms >= 0 ? (uint64_t)req->full_on_stall_ms : d->cfg.full_on_stall_ms;
        s->sealed_paths = json_array();
        return s;
}

/* Its pids in every pid namespace (the last, its own, names the files it
 * writes, e.g. /tmp/perf-PID.map) and its cgroup, for the metadata. */
static int session_read_placement(struct session *s)
{
        struct proc_facts f;
        int r = proc_facts_read(s->pid, s->pidfd_w.fd, &f);

        if (r < 0)
                return r;
        s->nspid = f.ns_pid;
        snprintf(s->pid_chain, sizeof(s->pid_chain), "%s", f.nspid);
        snprintf(s->cgroup, sizeof(s->cgroup), "%s", f.cgroup);
        return 0;
}

/* The quick checks, on the loop: pidfd first, since every check is about
 * the process behind it and d9_pidfd_alive() after the reads proves the PID
 * was not reused meanwhile. Also keeps the target's root directory: the
 * sealer finds its files there after it exited, never via /proc/PID. */
static int session_check_target(struct session *s, const struct session_request *req, char **why)
{
        char path[64];
        ssize_t n;
        int r;

        s->pidfd_w.fd = (int)syscall(SYS_pidfd_open, s->pid, 0);
        r = s->pidfd_w.fd < 0 ? -ESRCH : read_proc_identity(req->pid, &s->starttime, &s->uid);
        if (r == 0 && req->peer_uid != 0) {
                snprintf(path, sizeof(path), "/proc/%d/status", req->pid);
                s->status_fd = open(path, O_RDONLY | O_CLOEXEC);
                s->creds = s->status_fd >= 0 ? read_creds(s->status_fd) : NULL;
                if (!s->creds)
                        r = -ESRCH;
        }
        if (r == 0) {
                snprintf(path, sizeof(path), "/proc/%d/root", req->pid);
                s->root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC); /* -1: plain paths at seal time */
                r = session_read_placement(s);
                /* The sampler's reads go below this fd (openat, O_NOFOLLOW),
                 * never through the PID again: it names this process only. */
                snprintf(path, sizeof(path), "/proc/%d", req->pid);
                s->proc_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        }
        if (r == 0 && d9_pidfd_alive(s->pidfd_w.fd) < 0)
                r = -ESRCH;
        if (r < 0) {
                *why = d9_strdupf("no process with pid %d", req->pid);
                return r;
        }
        if (req->peer_uid != 0 && req->peer_uid != s->uid) {
                *why = not_yours(req);
                return -EPERM;
        }
        if (req->exe_fd >= 0)
                snprintf(path, sizeof(path), "/proc/%d/fd/%d", req->pid, req->exe_fd);
        else
                snprintf(path, sizeof(path), "/proc/%d/exe", req->pid);
        if ((n = readlink(path, s->exe, sizeof(s->exe) - 1)) > 0)
                s->exe[n] = 0;
        /* What the maps will call the executable (record --: once the
         * child has exec'd the file it opened), even when the plan comes
         * from another file (req->exe). */
        s->mapped_exe = strdup(s->exe);
        if (req->exe)
                snprintf(s->exe, sizeof(s->exe), "%s", req->exe);
        service_from_exe(s->d, s->exe, s->service, sizeof(s->service));
        return s->mapped_exe ? 0 : -ENOMEM;
}

void session_exe_file_to_translate(struct session *s)
{
        struct stat st;

        if (s->plan && s->plan->exe_fd >= 0 && fstat(s->plan->exe_fd, &st) == 0)
                translate_set_exe_file(&s->tr, st.st_dev, st.st_ino);
}

bool session_run_ticks_on(const struct session *s)
{
        /* A tick's stack shows a long poll only in a runtime task's poll
         * frame: with none known (no plan, or a build that polls only
         * blocking-pool tasks) each tick would cost the target for nothing. */
        if (!(s->probes & D9_PROBE_RUNS))
                return false;
        return s->plan ? probe_plan_poll_bodies(s->plan) > 0 : s->plan_pending && s->plan_ms < 0;
}

int session_enable_long_polls(struct session *s)
{
        s->tr.spawn_from_first_poll &= (s->probes & D9_PROBE_SPAWN) != 0;
        /* Set before the uprobes can record (they may attach later). */
        s->tr.end_at_next_poll = d9_bpf_poll_end_for(s->plan, s->probes, D9_POLL_END_AUTO) == D9_POLL_END_ENTRY_ONLY;
        s->tr.workers_from_polls = (s->probes & D9_PROBE_POLL) != 0;
        /* Default set: workers, parks and long polls from stacks (workers
         * and parks in a build whose only polls are blocking-pool ones). */
        if ((s->probes & D9_PROBE_RUNS) && s->plan && probe_plan_any_poll_bodies(s->plan))
                return long_poll_enable(&s->tr, D9_RUN_SAMPLE_US_DEFAULT * 1000ull, NULL, NULL);
        /* Poll uprobes: a poll running at the attach, from the CPU samples. */
        if ((s->probes & D9_PROBE_POLL) && (s->probes & D9_PROBE_CPU) && s->plan && probe_plan_poll_bodies(s->plan))
                return attach_poll_enable(&s->tr, NULL, NULL);
        return 0;
}

/* The wake points attaching or going, on the BPF thread: a uprobe's
 * registration waits for the target's mmap lock, and on the loop that
 * held the drain (npm nulljs: 2,529 ms, 63,177 records lost to the full
 * ring, a 2.4 s hole in the trace). */
struct session_wakes {
        struct plan_job job;            /* first: the BPF thread hands this back */
        struct session *s;
        bool on, changed;
        uint64_t ts, took_ns;           /* when the points were on (off), and how long that took */
};

void session_wake_window_now(struct session *s)
{
        /* While the BPF thread changes them, they are as they were: its
         * done writes the change. */
        if (s->wakes_sampled && s->bpf && s->tr.enc)
                translate_wake_window(&s->tr, d9_now_ns(),
                                      s->wake_job ? !s->wake_job->on : d9_bpf_target_wakes_on(s->bpf),
                                      WAKE_ON_TICKS * D9D_TICK_MS, WAKE_PERIOD_TICKS * D9D_TICK_MS);
}

void session_plan_json_refresh(struct session *s)
{
        json_decref(s->plan_json);
        s->plan_json = plan_to_json(s);
}

void session_plan_cache_put(const struct probe_plan *plan)
{
        if (!plan_cache)
                plan_cache = probe_plan_cache_new(PLAN_CACHE_FILES);
        probe_plan_cache_put(plan_cache, plan);
}

/* The second half, back on the loop once the BPF thread installed the
 * target's probes: the target must still be the process checked before
 * (and hold the credentials it had), then segments and the ring's watch. */
static int session_start_attach(struct session *s, const struct session_request *req, char **why)
{
        char dir[PATH_MAX];
        int r;

        if (d9_pidfd_alive(s->pidfd_w.fd) < 0) {
                *why = d9_strdupf("pid %d exited while being attached", s->pid);
                return -ESRCH;
        }
        if (session_gained_privileges(s)) {
                *why = d9_strdupf("pid %d changed credentials while being attached", s->pid);
                return -EPERM;
        }
        /* What the trace claims follows what attaches, not what was asked
         * for: a stripped build has no wake or park point to attach (and
         * no wake sampling to mark: npm oxc_language_server). */
        if (s->plan && !probe_plan_count(s->plan, PROBE_WAKE, false))
                s->wakes_sampled = false;
        r = translate_init(&s->tr, s->pid, s->plan,
                           (s->probes & D9_PROBE_WAKE) && !s->wakes_sampled && s->plan &&
                           probe_plan_count(s->plan, PROBE_WAKE, false),
                           (s->probes & D9_PROBE_PARK) && s->plan && probe_plan_count(s->plan, PROBE_PARK, false));
        if (r < 0)
                return r;
        session_exe_file_to_translate(s);
        /* With the plan at hand, the uprobes went on after the ring began
         * to record (d9_bpf_attach_target): a sample before that instant
         * proves no poll running since (attach_poll.c). */
        if (!s->plan_pending && (s->probes & TOKIO_PROBES))
                translate_uprobes_from(&s->tr, d9_bpf_target_uprobes_on_ns(s->bpf));
        r = session_enable_long_polls(s);
        if (r < 0)
                return r;
        session_window_setup(s);
        s->tr.hide_kernel = !kernel_addresses_visible(s->starter_uid);
        s->tr.stack_copy_bytes = D9_STACK_USER_BYTES;
        if (s->d->cfg.stack_deep_rate) {
                s->tr.deep_thread = session_deep_thread;
                s->tr.deep_ctx = s;
        }
        if (s->d->sampler) {
                s->tr.want_maps = session_want_maps;
                s->tr.want_maps_ctx = s;
        }
        translate_take_unwind_maps(&s->tr, s->unw_maps);
        s->unw_maps = NULL;
        /* Before the first segment: its metadata names the recording by
         * them, as every later one does (d9ctl report joins them so). */
        s->id = next_session_id++;
        s->started_unix_ms = wall_clock_ms();
        snprintf(dir, sizeof(dir), "%.3800s/%.127s/%d-%llu", s->d->traces_dir, s->service, s->pid,
                 (unsigned long long)s->starttime);
        r = segment_writer_init(&s->seg, dir);
        if (r == 0)
                segment_writer_grant(&s->seg, s->starter_uid); /* failure logged once, traces stay private */
        /* The ring has recorded since the install, and a plan's uprobes
         * were attached and switched on before this open (up to a second
         * on a loaded machine): the first segment's span starts there, so
         * none of its polls is older than it (npm codex: 40 ms before). */
        if (r == 0 && s->bpf) {
                segment_start_at(&s->seg, d9_bpf_target_since_ns(s->bpf));
                s->tr.recording_start_ts = d9_bpf_target_since_ns(s->bpf);
        }
        if (r == 0)
                r = session_open_segment(s);
        if (r < 0) {
                *why = d9_strdupf("cannot write segments in %s: %s", dir, strerror(-r));
                return r;
        }
        /* The map the BPF thread read at the install. */
        session_exe_map_update(s);
        r = session_watch_ring(s);
        if (r < 0)
                return r;
        /* The wake points attached with the rest: say so, from now on
         * (with a late plan, once its uprobes are attached). */
        if (!s->plan_pending)
                session_wake_window_now(s);
        /* pidfd: the exit notice even when sched probes are off. */
        s->pidfd_w.fn = session_on_pidfd;
        d9d_watch_add(s->d, &s->pidfd_w, EPOLLIN);
        s->started_ms = s->rate_ms = d9_now_ms();
        s->deadline_ms = req->duration_ms ? s->started_ms + req->duration_ms : 0;
        if (req->exec_ns) {
                s->timeline.attached = d9_now_ns();
                s->exec_to_attach_ms = (int64_t)(s->timeline.attached - req->exec_ns) / 1000000;
        }
        s->plan_json = plan_to_json(s);
        /* With the plan at hand (cached, or built first), the uprobes went
         * on as the install's last step, after the ring began to record
         * (d9_bpf_attach_target): from when. */
        if (!s->plan_pending && (s->probes & TOKIO_PROBES) && d9_bpf_target_uprobes_on_ns(s->bpf)) {
                char joined[160];

                snprintf(joined, sizeof(joined), "attached in %llu ms as the recording began: none of these "
                         "was recorded before",
                         (unsigned long long)(d9_bpf_target_attach_ns(s->bpf) / 1000000));
                session_uprobes_joined(s, joined);
        }
        r = session_samples_start(s);
        if (r < 0)
                log_warn("pid %d: resources and accept queues not sampled: %s", s->pid, strerror(-r));
        session_link(s->d, s);
        if (s->plan_pending) {
                log_info("pid %d (%s): recording, its probe plan being built, writing %s", s->pid, s->service, dir);
                session_late_attached(s);
        } else {
                log_info("pid %d (%s): attached, %zu uprobes, writing %s", s->pid, s->service,
                         d9_bpf_target_n_attached(s->bpf), dir);
        }
        return 0;
}

static void session_discard(struct session *s)
{
        session_late_end(s, NULL);
        /* Installed by the BPF thread but not wanted now (an attach that
         * failed or was cancelled afterwards, rare): stopped first, so the
         * links go on a thread of their own; the maps' grace period is
         * waited for here. */
        if (s->bpf)
                d9_bpf_target_stop(s->bpf);
        if (s->seg.fd >= 0) {
                char path[PATH_MAX];
                segment_close(&s->seg, path, sizeof(path));
                unlink(path);
        }
        session_free(s);
}

/* On the planner thread: s is nobody else's until the job is done. */
static void session_plan_run(struct plan_job *job)
{
        struct session_start *st = (struct session_start *)job;

        st->r = session_plan(st->s, &st->req, &st->why);
        st->planned = true;
        st->s->timeline.planned = st->s->timeline.exec != 0;
}

/* The calling thread's time runnable but not running (schedstat's second
 * field), 0 if unknown. */
static uint64_t thread_runq_ns(void)
{
        _cleanup_free_ char *text = symbolizer_read_proc_text("/proc/thread-self/schedstat");
        unsigned long long run, wait;

        return text && sscanf(text, "%llu %llu", &run, &wait) == 2 ? wait : 0;
}

/* On the BPF thread, once planned (or with a plan from the cache). The
 * target is checked again before anything is installed for it, and once
 * more on the loop after the attach. */
static void session_install_run(struct plan_job *job)
{
        struct session_start *st = (struct session_start *)job;
        struct session *s = st->s;

        uint64_t cpu0 = d9_thread_cpu_ns(), runq0 = s->timeline.exec ? thread_runq_ns() : 0;

        if (s->timeline.exec)
                s->timeline.install_begun = d9_now_ns();
        if (d9_pidfd_alive(s->pidfd_w.fd) < 0) {
                st->why = d9_strdupf("pid %d exited while its probe plan was built", s->pid);
                st->r = -ESRCH;
        } else if (session_gained_privileges(s)) {
                st->why = d9_strdupf("pid %d changed credentials while its probe plan was built", s->pid);
                st->r = -EPERM;
        } else {
                st->r = session_install_bpf(s, &st->why);
        }
        if (st->r == 0 && s->timeline.exec) {
                s->timeline.installed = d9_now_ns();
                s->timeline.uprobes_ns = d9_bpf_target_attach_ns(s->bpf);
                s->timeline.ring_insert_ns = d9_bpf_target_ring_insert_ns(s->bpf);
        }
        if (st->r == 0) {
                session_take_maps(s, sampler_read_maps(s->proc_fd, s->pidfd_w.fd));
                /* Here, off the loop: the files behind the map are opened too. */
                if (s->maps)
                        s->unw_maps = unwind_maps_open(s->proc_fd, s->maps);
        }
        if (st->r == 0 && s->timeline.exec) {
                s->timeline.maps_read = d9_now_ns();
                s->timeline.install_cpu_ns = d9_thread_cpu_ns() - cpu0;
                s->timeline.install_runq_ns = runq0 ? thread_runq_ns() - runq0 : 0;
        }
}

static void session_install_submit(struct d9d *d, struct session_start *st);

static void session_start_finish(struct d9d *d, struct session_start *st, bool cancelled)
{
        struct session *s = st->s;
        char *why = st->why;
        int r = st->r;

        starting_unlink(st);
        if (cancelled || d->stopping) {
                free(why);
                why = d9_strdupf(d->stopping ? "d9d is shutting down" : "the client went away");
                r = -ECANCELED;
        } else if (r == 0) {
                r = session_start_attach(s, &st->req, &why);
        }
        if (r < 0) {
                if (!why)
                        why = d9_strdupf("cannot attach to pid %d: %s", s->pid, strerror(-r));
                session_discard(s);
                s = NULL;
        }
        st->done(st->ctx, s, why ? why : "out of memory");
        free(why);
        free(st->exe_copy);
        free(st);
}

/* A plan of a running process's executable may serve the next ones. */
static void session_plan_keep(const struct session_start *st)
{
        if (st->r == 0 && st->s->plan && st->planned && !st->req.exe && st->req.exe_fd < 0) {
                if (!plan_cache)
                        plan_cache = probe_plan_cache_new(PLAN_CACHE_FILES);
                probe_plan_cache_put(plan_cache, st->s->plan);
        }
}

static void session_plan_done(struct d9d *d, struct plan_job *job)
{
        struct session_start *st = (struct session_start *)job;

        if (!job->cancelled)
                session_plan_keep(st);
        if (job->cancelled || d->stopping || st->r < 0) {
                session_start_finish(d, st, job->cancelled);
                return;
        }
        session_install_submit(d, st);
}

static void session_install_done(struct d9d *d, struct plan_job *job)
{
        session_start_finish(d, (struct session_start *)job, job->cancelled);
}

/* The BPF side next, on the BPF thread. The links of this pid's last
 * session may still be going away there (4,752 of them take up to a
 * second): the install waits for them on that thread, not on the loop. */
static void session_install_submit(struct d9d *d, struct session_start *st)
{
        st->installing = true;
        st->job.run = session_install_run;
        st->job.done = session_install_done;
        planner_submit(d->bpf_worker, &st->job);
}

int session_start(struct d9d *d, const struct session_request *req,
                  void (*done)(void *ctx, struct session *s, const char *why), void *ctx,
                  struct session_start **out, char **why)
{
        bool plan = (req->probes & PLANNED_PROBES) != 0;
        struct session_start *st = calloc(1, sizeof(*st));
        const char *busy;
        uid_t holder;
        int r;

        *why = NULL;
        if (!st || !(st->s = session_new(d, req))) {
                free(st);
                return -ENOMEM;
        }
        r = session_check_target(st->s, req, why);
        if (req->exec_ns)
                st->s->timeline = (struct attach_timeline){ .exec = req->exec_ns, .noticed = req->noticed_ns,
                                                            .checked = d9_now_ns() };
        /* After the owner check: a session the peer may not see reads as a
         * process it may not trace. */
        if (r == 0 && pid_taken(d, req->pid, &holder)) {
                r = req->peer_uid == 0 || req->peer_uid == holder ? -EBUSY : -EPERM;
                *why = r == -EBUSY ? d9_strdupf("pid %d is already being traced (detach it first)", req->pid)
                                   : not_yours(req);
        }
        /* The same file planned before: no planner turn. */
        if (r == 0 && plan && !req->exe && req->exe_fd < 0 &&
            probe_plan_cache_get(plan_cache, st->s->pidfd_w.fd, req->pid, &st->s->plan) == 0)
                plan = false;
        if (r == 0 && plan && (busy = planner_refuses(d->planner, req->peer_uid))) {
                *why = d9_strdupf("%s", busy);
                r = -EAGAIN;
        }
        /* A running process records from now on, its plan joins when it is
         * built (session_late.c). record -- plans first: its command execs
         * only once attached, so there is nothing to record before. */
        if (r == 0 && plan && !req->exe && req->exe_fd < 0 && !req->wait_plan) {
                r = session_late_begin(st->s, why);
                plan = false;
        }
        st->req = *req;
        if (r == 0 && req->exe && !(st->exe_copy = strdup(req->exe)))
                r = -ENOMEM;
        if (r < 0) {
                session_late_end(st->s, NULL);
                session_free(st->s);
                free(st);
                return r;
        }
        st->req.exe = st->exe_copy;
        st->req.rule = NULL;    /* copied into s->rule: a reload may free the caller's */
        st->done = done;
        st->ctx = ctx;
        st->job = (struct plan_job){ .uid = req->peer_uid, .run = session_plan_run, .done = session_plan_done };
        st->next = starting;
        starting = st;
        if (plan)
                planner_submit(d->planner, &st->job);
        else
                session_install_submit(d, st);  /* nothing to plan, or the plan cached */
        *out = st;
        return 0;
}

void session_start_cancel(struct session_start *st)
{
        struct d9d *d = st->s->d;

        planner_cancel(st->installing ? d->bpf_worker : d->planner, &st->job);
}

/* The time of what is written about the recording as a whole while it
 * runs (losses, short sleeps), and at its end (the workers still asleep):
 * now, or once the programs stopped writing, then. The stop's last steps
 * (open sleeps read from /proc, the counters) came 13-14 ms later on npm
 * nulljs, and two polls open at the end were reported that much longer,
 * over time nothing watched. */
static uint64_t session_observed_until(const struct session *s)
{
        uint64_t stopped = s->bpf ? d9_bpf_target_quiesced_ns(s->bpf) : 0;

        return stopped ? stopped : d9_now_ns();
}

static void session_account_drops(struct session *s)
{
        uint64_t dropped = 0;

        if (!s->bpf || d9_bpf_target_drops(s->bpf, &dropped) < 0 || dropped <= s->drops_reported)
                return;
        attach_poll_records_lost(&s->tr);
        if (s->tr.enc && translate_lost(&s->tr, session_observed_until(s), dropped - s->drops_reported, "ring") == 0)
                s->drops_reported = dropped;
        /* Compared with the count last logged, not last read: drops in
         * the 10 s after a warning are said at the next one. */
        if (dropped > s->drops_logged && d9_now_ms() - s->drops_logged_ms >= 10000) {
                s->drops_logged_ms = d9_now_ms();
                s->drops_logged = dropped;
                log_warn("pid %d: ring buffer full, %llu records lost so far", s->pid, (unsigned long long)dropped);
        }
        s->drops = dropped;
}

static void session_account_short_offcpu(struct session *s)
{
        struct d9_offcpu_short now, *was = &s->offcpu_short_reported;

        if (!s->bpf || d9_bpf_target_offcpu_short(s->bpf, &now) < 0)
                return;
        s->offcpu_short = now;
        /* Intervals BPF did not see begin (d9_count_unseen): lost, said so
         * in the trace and once in the log. */
        if (now.unseen > was->unseen && s->tr.enc &&
            translate_lost(&s->tr, session_observed_until(s), now.unseen - was->unseen, "switch") == 0) {
                if (!was->unseen)
                        log_warn("pid %d: %llu off-CPU intervals lost: a thread switched in with no switch-out seen",
                                 s->pid, (unsigned long long)now.unseen);
                was->unseen = now.unseen;
        }
        if (now.count <= was->count || !s->tr.enc)
                return;
        if (translate_offcpu_short(&s->tr, session_observed_until(s), now.count - was->count, now.ns - was->ns,
                                   s->offcpu_min_us * 1000) == 0) {
                was->count = now.count;
                was->ns = now.ns;
        }
}

/* Where the default set's BPF looks for each stack's Worker (docs/probe-plan.md
 * "Worker identity"), for status and, once, the log: when no depth is
 * confirmed, worker ids come by thread, and a trace alone does not say why. */
#define D9_WK_RESWEEP_MS 250

/* That sweep reads the target's stacks (bpf_copy_from_user_task, which may
 * wait on the target's memory), so it runs on the BPF thread, as the
 * attach's does, not on the drain loop. */
struct session_sweep {
        struct plan_job job;    /* first: the BPF thread hands this back */
        struct session *s;
};

static void sweep_run(struct plan_job *job)
{
        struct session_sweep *w = (struct session_sweep *)job;

        (void)d9_bpf_target_sweep_workers(w->s->bpf);
}

static void sweep_done(struct d9d *d, struct plan_job *job)
{
        struct session_sweep *w = (struct session_sweep *)job;
        struct session *s = w->s;

        (void)d;
        s->sweep_job = NULL;
        free(w);
        session_end_deferred(s);
}

static void session_sweep_workers_again(struct session *s)
{
        struct session_sweep *w;

        /* Busy with another job: at the next count. */
        if (session_bpf_busy(s) || s->stopping || s->state != SESSION_RECORDING)
                return;
        s->worker_resweep_done = true;
        if (!(w = calloc(1, sizeof(*w))))
                return;
        w->s = s;
        w->job = (struct plan_job){ .uid = s->starter_uid, .run = sweep_run, .done = sweep_done };
        s->sweep_job = w;
        planner_submit(s->d->bpf_worker, &w->job);
}

static void session_account_worker_search(struct session *s)
{
        struct d9_worker_search *ws = &s->worker_search;
        bool had = ws->depth != 0;

        if (!s->bpf || !(s->probes & D9_PROBE_RUNS) || (s->probes & D9_PROBE_POLL) ||
            d9_bpf_target_worker_search(s->bpf, ws) < 0)
                return;
        /* The attach's sweep (or the plan's) may come before the runtime's
         * threads exist (`d9ctl record --`), and idle workers take no stack
         * of their own: npm pagefind 1.6.0's two, parked from their start,
         * were never scanned, and the one-worker rule (d9_wk_solo) took an
         * actix thread's look-alike. Once, D9_WK_RESWEEP_MS into a search
         * with nothing confirmed, before d9_wk_solo may decide. */
        if (ws->begun && !ws->depth && !ws->from_thread_pointer && !s->worker_resweep_done &&
            d9_now_ns() - ws->begun_ns >= D9_WK_RESWEEP_MS * 1000000ull)
                session_sweep_workers_again(s);
        if (ws->depth && !had)
                log_info("pid %d: the worker loops' Worker lies %llu bytes below the %s, confirmed %llu ms "
                         "into the search (%u candidate depths, %u ruled out)", s->pid,
                         (unsigned long long)ws->depth,
                         ws->from_thread_pointer ? "thread pointer (the TLS size comes with the plan)" : "TLS",
                         (unsigned long long)((ws->confirmed_ns - ws->begun_ns) / 1000000),
                         ws->candidates, ws->ruled_out);
}

/* The target's BPF counters, into status and the trace. */
static void session_account_bpf_counters(struct session *s)
{
        session_account_drops(s);
        session_account_short_offcpu(s);
        session_account_worker_search(s);
        if (s->tr.enc)
                long_poll_flush(&s->tr, false);
}

/* The workers asleep as the recording ends get their last park
 * (open_sleep.h); after the last drain, before the segment closes. */
static void session_write_open_sleeps(struct session *s)
{
        int r = s->tr.enc ? open_sleeps_write(&s->tr, s->open_sleeps, session_observed_until(s)) : 0;

        if (r < 0)
                log_warn("pid %d: the workers asleep at the end not written: %s", s->pid, strerror(-r));
        open_sleeps_free(s->open_sleeps);
        s->open_sleeps = NULL;
}

/* How the session's user stacks were unwound, for a log kept by a failed
 * run: a recording whose every sleep lost std's sleep frame (rehearsal 47,
 * once) left no word of whether CFI or a fallback step walked it. */
static void session_log_unwinding(const struct session *s)
{
        struct unwind_stats us;

        if (!s->tr.unw)
                return;
        unwinder_get_stats(s->tr.unw, &us);
        log_info("pid %d: unwound %llu stacks, %llu frames; steps past frames without CFI: %llu frameless, "
                 "%llu frame pointer, %llu scan; %llu module sets built, %llu newer maps asked for, %llu leaves where "
                 "the map showed no code",
                 s->pid, (unsigned long long)us.stacks, (unsigned long long)us.frames,
                 (unsigned long long)us.steps[1], (unsigned long long)us.steps[2], (unsigned long long)us.steps[3],
                 (unsigned long long)us.reports, (unsigned long long)us.maps_asked,
                 (unsigned long long)us.maps_stale);
}

static void session_end_now(struct session *s, const char *reason)
{
        if (s->bpf) {
                d9d_watch_del(s->d, &s->ring_w);
                /* Stop first (the programs write nothing more, the ring is
                 * drained into this segment), count the last drops, then let
                 * the links go in the background: the caller need not wait
                 * for their grace periods. After a stop on the BPF thread
                 * this only drains the rest. */
                d9_bpf_target_stop(s->bpf);
                session_write_open_sleeps(s);
                session_account_bpf_counters(s);
                if (s->worker_search.begun && !s->worker_search.depth) {
                        char cands[640];

                        d9_bpf_target_worker_candidates(s->bpf, cands, sizeof(cands));
                        log_info("pid %d: no Worker depth confirmed in %llu ms of search (%u candidate depths, "
                                 "%u ruled out, %u scans found nothing): no stack named its worker%s%s", s->pid,
                                 (unsigned long long)((d9_now_ns() - s->worker_search.begun_ns) / 1000000),
                                 s->worker_search.candidates, s->worker_search.ruled_out,
                                 s->worker_search.misses, cands[0] ? "; bytes below the TLS: " : "", cands);
                }
                d9_bpf_detach_target(s->bpf);
                s->bpf = NULL;
        }
        session_samples_stop(s);
        if (s->pidfd_w.fd >= 0) {
                d9d_watch_del(s->d, &s->pidfd_w);
                close(s->pidfd_w.fd);
                s->pidfd_w.fd = -1;
        }
        if (s->status_fd >= 0) {
                close(s->status_fd);
                s->status_fd = -1;
        }
        s->state = SESSION_SEALING;
        s->ended_ms = d9_now_ms();
        snprintf(s->end_reason, sizeof(s->end_reason), "%s", reason);
        session_close_segment(s);
        if (s->root_fd >= 0) {
                close(s->root_fd);
                s->root_fd = -1;
        }
        if (s->proc_fd >= 0) {
                close(s->proc_fd);
                s->proc_fd = -1;
        }
        session_log_unwinding(s);
        /* Finished sessions stay listed (up to FINISHED_KEPT) for status. */
        translate_release(&s->tr);
        session_release_recording(s);
        if (!s->segments_pending)
                s->state = SESSION_DONE;
        log_info("pid %d: session ended (%s): %llu events, %llu drops", s->pid, reason,
                 (unsigned long long)s->tr.events, (unsigned long long)s->drops);
}

/* Sampled wakes: the wake points attached for WAKE_ON_TICKS ticks of every
 * WAKE_PERIOD_TICKS, each change written into the trace. A wake hit costs
 * the target a trap (about a poll's worth, docs/performance.md) whatever
 * the program does, so only detaching makes wakes cheaper. */
static void wakes_run(struct plan_job *job)
{
        struct session_wakes *w = (struct session_wakes *)job;
        uint64_t t0 = d9_now_ns();
        int r = d9_bpf_target_set_wakes(w->s->bpf, w->on);

        w->ts = d9_now_ns();
        w->took_ns = w->ts - t0;
        w->changed = r == 0 && d9_bpf_target_wakes_on(w->s->bpf) == w->on;
}

static void wakes_done(struct d9d *d, struct plan_job *job)
{
        struct session_wakes *w = (struct session_wakes *)job;
        struct session *s = w->s;

        (void)d;
        s->wake_job = NULL;
        if (!job->cancelled && w->took_ns > 20000000ull)
                log_info("pid %d: attaching/detaching the wake points took %llu ms (the drain went on)", s->pid,
                         (unsigned long long)(w->took_ns / 1000000));
        if (!job->cancelled && w->changed && s->tr.enc && s->state == SESSION_RECORDING)
                translate_wake_window(&s->tr, w->ts, w->on, WAKE_ON_TICKS * D9D_TICK_MS,
                                      WAKE_PERIOD_TICKS * D9D_TICK_MS);
        free(w);
        session_end_deferred(s);
}

static void session_sample_wakes(struct session *s)
{
        struct session_wakes *w;
        bool on;

        if (!s->wakes_sampled || !s->bpf || session_bpf_busy(s) || s->stopping || s->state != SESSION_RECORDING)
                return;
        on = ++s->wake_tick % WAKE_PERIOD_TICKS < WAKE_ON_TICKS;
        if (on == d9_bpf_target_wakes_on(s->bpf) || !(w = calloc(1, sizeof(*w))))
                return;
        w->s = s;
        w->on = on;
        w->job = (struct plan_job){ .uid = s->starter_uid, .run = wakes_run, .done = wakes_done };
        s->wake_job = w;
        planner_submit(s->d->bpf_worker, &w->job);
}

/* A stop under way on the BPF thread: the config and ring leave the maps
 * there, whose grace period (5-850 ms under load) the loop does not wait
 * for; it keeps draining this ring meanwhile, and the rest of the end
 * follows once the thread is done. */
struct session_stop {
        struct plan_job job;            /* first: the BPF thread hands this back */
        struct session *s;
        char *maps;                     /* the last chance to read them: the pidfd goes next */
        char reason[128];
};

static void session_stop_run(struct plan_job *job)
{
        struct session_stop *st = (struct session_stop *)job;

        d9_bpf_target_quiesce(st->s->bpf);
        st->maps = sampler_read_maps(st->s->proc_fd, st->s->pidfd_w.fd);
        /* Where its workers sleep, off the loop (open_sleep.h). */
        if (st->s->proc_fd >= 0)
                st->s->open_sleeps = open_sleeps_capture(st->s->bpf, st->s->proc_fd, st->s->pid, st->maps);
}

static void session_stop_done(struct d9d *d, struct plan_job *job)
{
        struct session_stop *st = (struct session_stop *)job;
        struct session *s = st->s;

        /* Cancelled (d9d stopping before it ran): the stop happens here,
         * with the maps read last. */
        s->stopping = false;
        session_take_maps(s, st->maps);
        session_end_now(s, st->reason);
        if (s->on_ended)
                s->on_ended(s->on_ended_ctx, s);
        s->on_ended = NULL;
        free(st);
}

void session_end(struct session *s, const char *reason)
{
        struct session_stop *st;

        if (s->state != SESSION_RECORDING || s->stopping)
                return;
        /* Its uprobes are being attached or a window changes on the BPF
         * thread: the end follows once that is done (the stop must not race
         * it). */
        if (session_bpf_busy(s)) {
                s->stopping = true;
                snprintf(s->end_deferred, sizeof(s->end_deferred), "%s", reason);
                return;
        }
        session_late_end(s, reason);
        /* The held records it translated may have ended the session. */
        if (s->state != SESSION_RECORDING || s->stopping)
                return;
        if (s->bpf && !s->d->stopping && (st = calloc(1, sizeof(*st)))) {
                st->s = s;
                snprintf(st->reason, sizeof(st->reason), "%s", reason);
                st->job = (struct plan_job){ .uid = s->starter_uid, .run = session_stop_run,
                                             .done = session_stop_done };
                s->stopping = true;
                planner_submit(s->d->bpf_worker, &st->job);
                return;
        }
        session_end_now(s, reason);
        if (s->on_ended)
                s->on_ended(s->on_ended_ctx, s);
        s->on_ended = NULL;
}

void session_end_deferred(struct session *s)
{
        char reason[128];

        if (!s->end_deferred[0] || session_bpf_busy(s))
                return;
        snprintf(reason, sizeof(reason), "%s", s->end_deferred);
        s->end_deferred[0] = 0;
        s->stopping = false;
        session_end(s, reason);
}

bool session_ending(const struct session *s)
{
        return s->stopping;
}

void session_tick(struct session *s, uint64_t now_ms)
{
        const char *full;

        /* Pick up what arrived since the last wakeup before judging time. */
        if (!session_drain_while_permitted(s, false))
                return;
        session_late_replay_step(s);
        if (s->state != SESSION_RECORDING)
                return;
        session_account_bpf_counters(s);
        session_sample_wakes(s);
        session_window_tick(s, now_ms);
        /* Over 2 s, not one tick: a target whose events come in bursts
         * read "events/s 0" between them (npm anvil: 221 events by 3.1 s).
         * The first 2 s: since the start. */
        if (now_ms - s->rate_ms >= RATE_WINDOW_MS || (s->rate_ms == s->started_ms && now_ms > s->rate_ms)) {
                s->events_per_s = (double)(s->tr.events - s->rate_events) * 1000.0 / (double)(now_ms - s->rate_ms);
                if (now_ms - s->rate_ms >= RATE_WINDOW_MS) {
                        s->rate_events = s->tr.events;
                        s->rate_ms = now_ms;
                }
        }
        if (s->tr.exited) {
                session_end(s, "target exited");
                return;
        }
        if (s->deadline_ms && now_ms >= s->deadline_ms) {
                session_end(s, "duration reached");
                return;
        }
        if (now_ms - s->seg.opened_ms >= s->d->cfg.rotate_period_ms)
                session_rotate(s, "period");
        else if ((full = session_segment_full(s)))
                session_rotate(s, full);
        else if (s->tr.ws.changed && session_refresh_metadata(s) < 0)
                session_end(s, "encoder error");
}

struct session *session_find(struct d9d *d, pid_t pid, bool live_only)
{
        for (struct session *s = d->sessions; s; s = s->next)
                if (s->pid == pid && (!live_only || (s->state == SESSION_RECORDING && !s->stopping)))
                        return s;
        return NULL;
}

static const char *state_name(enum session_state st)
{
        return st == SESSION_RECORDING ? "recording" : st == SESSION_SEALING ? "sealing" : "done";
}

/* µs after the exec; a step not reached yet is absent. */
static json_t *attach_timeline_json(const struct attach_timeline *t)
{
        const struct { const char *name; uint64_t at; } steps[] = {
                { "noticed_us", t->noticed }, { "checked_us", t->checked },
                { "install_begun_us", t->install_begun }, { "installed_us", t->installed },
                { "maps_read_us", t->maps_read }, { "attached_us", t->attached },
                { "first_event_us", t->first_event },
        };
        json_t *j = json_pack("{s:b,s:I,s:I,s:I}", "planned", t->planned,
                              "uprobes_us", (json_int_t)(t->uprobes_ns / 1000),
                              "install_cpu_us", (json_int_t)(t->install_cpu_ns / 1000),
                              "install_runq_us", (json_int_t)(t->install_runq_ns / 1000));

        json_object_set_new(j, "ring_insert_us", json_integer((json_int_t)(t->ring_insert_ns / 1000)));

        for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
                if (steps[i].at)
                        json_object_set_new(j, steps[i].name,
                                            json_integer((json_int_t)(steps[i].at - t->exec) / 1000));
        return j;
}

/* The default set's Worker search: "found" with the depth and how long
 * it took, else "searching" (scans still run on every new thread and
 * every 100 ms per thread); what it weighs either way. */
static json_t *worker_search_json(const struct d9_worker_search *ws)
{
        json_t *j = json_pack("{s:s,s:I,s:I,s:I}", "state", ws->depth ? "found" : "searching",
                              "candidate_depths", (json_int_t)ws->candidates,
                              "ruled_out", (json_int_t)ws->ruled_out,
                              "scans_found_nothing", (json_int_t)ws->misses);

        if (ws->depth) {
                json_object_set_new(j, "depth_bytes", json_integer((json_int_t)ws->depth));
                json_object_set_new(j, "below", json_string(ws->from_thread_pointer ? "thread_pointer" : "tls"));
                json_object_set_new(j, "found_after_ms",
                                    json_integer((json_int_t)((ws->confirmed_ns - ws->begun_ns) / 1000000)));
        }
        return j;
}

json_t *session_status_json(const struct session *s)
{
        json_t *j = json_pack("{s:I,s:i,s:I,s:s,s:s,s:s,s:f,s:I,s:I,s:I,s:i,s:i,s:O,s:O,s:I,s:s,s:{s:I,s:I,s:I,s:I}}",
                "session", (json_int_t)s->id, "pid", s->pid, "starttime", (json_int_t)s->starttime,
                "service", s->service, "state", s->stopping ? "stopping" : state_name(s->state), "dir", s->seg.dir,
                "events_per_s", s->events_per_s, "events", (json_int_t)s->tr.events,
                "drops", (json_int_t)s->drops, "bytes", (json_int_t)(s->bytes_sealed + segment_size(&s->seg)),
                "segments", s->segments_sealed, "segments_pending", s->segments_pending,
                "sealed", s->sealed_paths, "probe_plan", s->plan_json ? s->plan_json : json_null(),
                "records", (json_int_t)s->tr.records, "end_reason", s->end_reason,
                "offcpu_short", "min_us", (json_int_t)s->offcpu_min_us,
                "intervals", (json_int_t)s->offcpu_short.count, "total_ns", (json_int_t)s->offcpu_short.ns,
                "unseen_switch_outs", (json_int_t)s->offcpu_short.unseen);
        if (j && s->privileged)
                json_object_set_new(j, "discarded_privileged", json_integer((json_int_t)s->discarded));
        /* Tasks idle so long their spawn may be written again (live_tasks.h). */
        uint64_t forgotten = s->tr.tasks_forgotten + s->tr.live.forgotten;
        if (j && forgotten)
                json_object_set_new(j, "tasks_forgotten", json_integer((json_int_t)forgotten));
        /* The default set's run ticks that kept a stack (none once a plan
         * with no runtime task poll body turned them off). */
        if (j && (s->probes & D9_PROBE_RUNS))
                json_object_set_new(j, "run_ticks", json_integer((json_int_t)s->tr.run_ticks));
        json_object_set_new(j, "nspid", json_string(s->pid_chain));
        json_object_set_new(j, "cgroup", json_string(s->cgroup));
        if (s->rule[0]) {
                json_object_set_new(j, "rule", json_string(s->rule));
                if (s->exec_to_attach_ms >= 0) {
                        json_object_set_new(j, "exec_to_attach_ms", json_integer(s->exec_to_attach_ms));
                        json_object_set_new(j, "exec_to_attach", attach_timeline_json(&s->timeline));
                }
        }
        /* Stacks: unwound, not, off-CPU samples that say why they have none,
         * and those taken in d9d's own probes ([d9d uprobe], docs/stacks.md). */
        json_object_set_new(j, "stacks", json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
                "unwound", (json_int_t)s->tr.stacks, "failed", (json_int_t)s->tr.stacks_failed,
                "offcpu_without_stack", (json_int_t)s->tr.offcpu_no_stack,
                "cpu_samples_without_stack", (json_int_t)s->tr.cpu_no_stack,
                "in_d9d_probes", (json_int_t)s->tr.probe_stacks,
                "unwound_from_trap_site", (json_int_t)s->tr.stacks_in_trap,
                "frames_outside_mappings", (json_int_t)s->tr.frames_outside,
                "module_files_not_local", (json_int_t)s->tr.files_not_local,
                "cut_at_copy_end", (json_int_t)s->tr.stacks_cut,
                "cut_by_byte_cap", (json_int_t)s->tr.stacks_cut_capped,
                "cut_for_ring_room", (json_int_t)s->tr.stacks_cut_room,
                "cut_at_page_not_in_memory", (json_int_t)s->tr.stacks_cut_unread,
                "cut_at_frame_limit", (json_int_t)s->tr.stacks_capped,
                "cut_placed_in_poll_by_site", (json_int_t)s->tr.cut_in_poll_by_site,
                "deep_copies", (json_int_t)s->tr.stacks_deep,
                "deep_bytes", (json_int_t)s->tr.stacks_deep_bytes,
                "record_bytes", (json_int_t)s->tr.stack_bytes));
        /* Worker identity: task polls whose worker BPF did not find on the
         * stack and ids given to threads standing in for their worker
         * (either set), cores seen moving to another thread
         * (block_in_place), polls ended by their task's next poll on
         * another thread (translate.c, note_task_polled_elsewhere), and
         * polls whose end was among their thread's lost records. */
        json_object_set_new(j, "workers", json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}",
                "polls_by_thread", (json_int_t)s->tr.polls_by_thread,
                "ids_by_thread", (json_int_t)s->tr.ids_by_thread,
                "hand_offs", (json_int_t)s->tr.cores_handed,
                "polls_ended_by_task_elsewhere", (json_int_t)s->tr.polls_ended_by_task,
                "poll_ends_lost", (json_int_t)s->tr.poll_ends_lost,
                "sleeps_after_poll_end", (json_int_t)s->tr.offcpu_after_poll));
        if (s->worker_search.begun)
                json_object_set_new(json_object_get(j, "workers"), "search", worker_search_json(&s->worker_search));
        json_object_set_new(j, "samples", session_samples_json(s));
        /* Drops: whether the ring was full at a drain after a long gap
         * (the loop late) or between drains close together (too small). */
        json_object_set_new(j, "ring", json_pack("{s:I,s:I,s:I,s:I,s:I}",
                "bytes", (json_int_t)s->drains.ring_bytes, "fill_max_bytes", (json_int_t)s->drains.fill_max,
                "drains_woken", (json_int_t)s->drains.woken, "drains_timer", (json_int_t)s->drains.timer,
                "drain_gap_max_ms", (json_int_t)(s->drains.gap_max_ns / 1000000)));
        json_object_set_new(j, "plan", session_late_json(s));
        json_object_set_new(j, "full_on_stall", session_window_json(s));
        /* Ended sessions: the length of the recording; live ones: so far. */
        uint64_t until = s->state == SESSION_RECORDING ? d9_now_ms() : s->ended_ms;
        json_object_set_new(j, "started_unix_ms", json_integer((json_int_t)s->started_unix_ms));
        json_object_set_new(j, "duration_ms", json_integer((json_int_t)(until - s->started_ms)));
        if (s->state != SESSION_RECORDING)
                json_object_del(j, "events_per_s"); /* a rate only means something while recording */
        return j;
}

void session_on_sealed(struct d9d *d, struct seal_job *job)
{
        for (struct session *s = d->sessions; s; s = s->next) {
                if (s->id != job->session_id)
                        continue;
                s->segments_pending--;
                if (!job->error) {
                        s->segments_sealed++;
                        s->bytes_sealed += job->bytes;
                        json_array_append_new(s->sealed_paths, json_string(job->sealed));
                }
                if (s->state == SESSION_SEALING && !s->segments_pending)
                        s->state = SESSION_DONE;
                return;
        }
}

void sessions_prune(struct d9d *d)
{
        uint64_t now = d9_now_ms();
        unsigned finished = 0;

        for (struct session **pp = &d->sessions; *pp;) {
                struct session *s = *pp;
                if (s->state == SESSION_DONE && !s->late && !s->win_job && !s->wake_job &&
                    (++finished > FINISHED_KEPT || now - s->ended_ms >= d->cfg.finished_keep_ms)) {
                        *pp = s->next;
                        session_free(s);
                        continue;
                }
                pp = &s->next;
        }
}

void sessions_free_all(struct d9d *d)
{
        while (d->sessions) {
                struct session *s = d->sessions;
                d->sessions = s->next;
                session_free(s);
        }
}

size_t session_bpf_teardowns_pending(void)
{
        return d9_bpf_teardowns_pending(shared_bpf);
}

void session_bpf_reap(void)
{
        d9_bpf_reap(shared_bpf);
}

bool session_bpf_armed(void)
{
        return d9_bpf_armed(shared_bpf);
}

void session_bpf_close(void)
{
        size_t n = d9_bpf_teardowns_pending(shared_bpf);

        if (n)
                log_info("waiting for the uprobe links of %zu detached target(s) to go", n);
        d9_bpf_close(shared_bpf);
        shared_bpf = NULL;
        probe_plan_cache_free(plan_cache);
        plan_cache = NULL;
}

/* s->probes goes to BPF as is: the groups are the BPF side's bits. */
_Static_assert((unsigned)D9_PROBE_RUNS == D9_PROBE_RUNS, "longpoll group = D9_PROBE_RUNS");
_Static_assert((unsigned)D9_PROBE_ALL == D9_PROBE_ALL, "probe groups = BPF probe bits");
