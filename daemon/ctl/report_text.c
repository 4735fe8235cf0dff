/* report_text.c: the one-screen text form of d9ctl report's JSON document. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "report.h"
#include "d9control.h"
#include "daemon/symbolize/stack_marks.h"

#define FRAMES_SHOWN 6

static double ms(const json_t *o, const char *key)
{
        return (double)json_integer_value(json_object_get(o, key)) / 1e6;
}

/* The kernel's leaf frame (where the thread sat), then the user frames,
 * named ones only (unnamed ones would push the callers off the line), then
 * how many were left out. */
static void print_stack(FILE *out, const json_t *p)
{
        const json_t *stack = json_object_get(p, "stack");
        size_t n = json_array_size(stack), kernel = (size_t)json_integer_value(json_object_get(p, "kernel_frames"));
        size_t shown = 0;

        if (!n) {
                fputs("(no stack)", out);
                return;
        }
        /* A runnable switch-out's mark leads its kernel frames. */
        const char *leaf = json_string_value(json_array_get(stack, 0));
        size_t runnable = leaf && !strcmp(leaf, stack_mark_name(stack_mark_addr(STACK_MARK_RUNNABLE)));

        if (kernel > runnable)
                fprintf(out, "[kernel %s%s] ", json_string_value(json_array_get(stack, runnable)),
                        runnable ? ", runnable" : "");
        else if (runnable)
                fputs("[runnable] ", out);
        for (size_t i = kernel; i < n && shown < FRAMES_SHOWN; i++) {
                const char *s = json_string_value(json_array_get(stack, i));
                if (!s || !strncmp(s, "0x", 2))
                        continue;
                fprintf(out, "%s%s", shown ? " <- " : "", s);
                shown++;
        }
        if (!shown)
                fprintf(out, "(%zu unnamed user frames)", n - kernel);
        else if (shown + kernel < n)
                fprintf(out, " (+%zu)", n - kernel - shown);
}

static void print_polls(FILE *out, const char *title, const json_t *list, const char *samples_key, const char *none)
{
        size_t i;
        const json_t *p;

        fprintf(out, "\n%s\n", title);
        if (!json_array_size(list)) {
                fprintf(out, "  %s\n", none);
                return;
        }
        json_array_foreach(list, i, p) {
                const char *future = json_string_value(json_object_get(p, "future"));
                fprintf(out, "  %9.3f ms  worker %-3d task %-8" JSON_INTEGER_FORMAT " %s%s\n", ms(p, "duration_ns"),
                        (int)json_integer_value(json_object_get(p, "worker")),
                        json_integer_value(json_object_get(p, "task")), future ? future : "(unknown future)",
                        json_is_true(json_object_get(p, "open")) ? " (open when the recording ended: at least)" : "");
                const char *from = json_string_value(json_object_get(p, "stack_from"));
                fprintf(out, "               %" JSON_INTEGER_FORMAT " %s%s: ",
                        json_integer_value(json_object_get(p, samples_key)),
                        !strcmp(samples_key, "cpu_samples") ? "CPU samples" : "off-CPU samples",
                        !from || !strcmp(from, "cpu_sample") ? ""
                        : !strcmp(from, "preempted") ? ", preempted here" : ", switched out here");
                print_stack(out, p);
                fputc('\n', out);
        }
}

/* The default set's long polls: no poll events, so each row is a span
 * the worker was seen inside polls of one future, and says how it was
 * seen (running ticks, blocked, preempted). Ticks see no poll boundary:
 * back-to-back polls of one future read as one (npm vaulttools: 769 ms
 * was three tool calls of at most 370 ms), and a busy worker's short polls
 * of other futures fall between ticks unseen (npm postgrestools on one
 * worker: 5,246 ms, where no poll took over 120 ms), so a row is no
 * bound on one poll's length. */
static void print_long_polls(FILE *out, const json_t *doc)
{
        const json_t *list = json_object_get(doc, "long_polls_from_stacks"), *p;
        size_t i;

        fprintf(out, "\nLong polls seen from stacks and switches (not from poll events; %" JSON_INTEGER_FORMAT
                " in all): how long the worker was seen inside polls of one future with no sleep between, one poll "
                "or many back-to-back (short polls of other futures between them are not seen); \"blocked\": it "
                "slept inside a poll, which lasted at least that sleep\n",
                json_integer_value(json_object_get(doc, "long_polls_from_stacks_total")));
        json_array_foreach(list, i, p) {
                const char *future = json_string_value(json_object_get(p, "future"));
                const char *how = json_string_value(json_object_get(p, "how"));
                json_int_t worker = json_integer_value(json_object_get(p, "worker"));
                char who[32];

                if (!how)
                        how = "";

                /* A poll running at the attach: its worker is not known yet. */
                if (worker < 255)
                        snprintf(who, sizeof(who), "worker %-3d", (int)worker);
                else
                        snprintf(who, sizeof(who), "tid %" JSON_INTEGER_FORMAT,
                                 json_integer_value(json_object_get(p, "tid")));
                fprintf(out, "  seen %9.3f ms  %-10s %-9s %3" JSON_INTEGER_FORMAT " ticks  %s",
                        ms(p, "min_ns"), who, how, json_integer_value(json_object_get(p, "ticks")),
                        future && *future ? future : "(unknown future)");
                /* A poll seen running that mostly waited for a CPU: the
                 * machine or its cgroup held it, as much as its own work. */
                if (!strcmp(how, "running") && json_integer_value(json_object_get(p, "waited_ns")) > 0)
                        fprintf(out, " (%.3f ms of it waiting for a CPU)", ms(p, "waited_ns"));
                fputs("\n               ", out);
                print_stack(out, p);
                fputc('\n', out);
        }
}

/* One line per row: its length in ms (from key), worker, task, future. */
static void print_rows(FILE *out, const json_t *list, const char *key, bool worker, const char *none)
{
        size_t i;
        const json_t *v;

        if (!json_array_size(list))
                fprintf(out, "  %s\n", none);
        json_array_foreach(list, i, v) {
                const char *future = json_string_value(json_object_get(v, "future"));
                fprintf(out, "  %9.3f ms  ", ms(v, key));
                if (worker)
                        fprintf(out, "worker %-3d ", (int)json_integer_value(json_object_get(v, "worker")));
                fprintf(out, "task %-8" JSON_INTEGER_FORMAT " %s\n", json_integer_value(json_object_get(v, "task")),
                        future ? future : "(unknown future)");
        }
}

/* What d9d sampled of the process (docs/process.md), when it did. */
static void print_process(FILE *out, const json_t *p)
{
        const json_t *q;
        size_t i;

        const char *res_stopped = json_string_value(json_object_get(p, "resources_stopped"));
        const char *aq_stopped = json_string_value(json_object_get(p, "accept_queues_stopped"));

        if (!json_integer_value(json_object_get(p, "resource_samples")) &&
            !json_array_size(json_object_get(p, "accept_queues")) && !res_stopped && !aq_stopped)
                return;
        fprintf(out, "\nProcess (%" JSON_INTEGER_FORMAT " resource samples)\n", json_integer_value(json_object_get(p, "resource_samples")));
        if (json_integer_value(json_object_get(p, "resource_samples")))
                fprintf(out, "  peak CPU %.2f cores, RSS %.1f MiB, %" JSON_INTEGER_FORMAT " threads, %" JSON_INTEGER_FORMAT
                        " open fds, %.0f involuntary switches/s\n", json_real_value(json_object_get(p, "max_cores")),
                        (double)json_integer_value(json_object_get(p, "max_rss_bytes")) / 1048576.0,
                        json_integer_value(json_object_get(p, "max_threads")),
                        json_integer_value(json_object_get(p, "max_open_fds")),
                        json_real_value(json_object_get(p, "max_involuntary_switches_per_s")));
        json_array_foreach(json_object_get(p, "accept_queues"), i, q)
                fprintf(out, "  accept queue %s:%" JSON_INTEGER_FORMAT ": at most %" JSON_INTEGER_FORMAT
                        " waiting (backlog %" JSON_INTEGER_FORMAT "), full in %" JSON_INTEGER_FORMAT " of %"
                        JSON_INTEGER_FORMAT " samples\n", json_string_value(json_object_get(q, "local_addr")),
                        json_integer_value(json_object_get(q, "local_port")),
                        json_integer_value(json_object_get(q, "max_pending")),
                        json_integer_value(json_object_get(q, "backlog_limit")),
                        json_integer_value(json_object_get(q, "samples_full")),
                        json_integer_value(json_object_get(q, "samples")));
        if (res_stopped)
                fprintf(out, "  process resources: d9d stopped sampling them: %s\n", res_stopped);
        if (aq_stopped)
                fprintf(out, "  accept queues: d9d stopped sampling them: %s\n", aq_stopped);
}

/* Tasks alive, queued and being polled (report_tasks.h): the peaks. */
/* Whether thread tid was in one poll since the attach (a long poll "at
 * attach"): its worker is not known, the poll is. */
static bool in_poll_since_attach(const json_t *doc, json_int_t tid)
{
        const json_t *p;
        size_t i;

        json_array_foreach(json_object_get(doc, "long_polls_from_stacks"), i, p) {
                const char *how = json_string_value(json_object_get(p, "how"));

                if (json_integer_value(json_object_get(p, "tid")) == tid && how && !strcmp(how, "at attach"))
                        return true;
        }
        return false;
}

/* The on-CPU samples of threads on no worker by thread name, once they
 * add up to a tenth: many short-lived threads, none big enough to list
 * alone (npm codex: 86 % on 74 file walkers, the busiest 2.7 %), hid
 * where the CPU went. */
static void print_cpu_off_workers_by_name(FILE *out, const json_t *doc)
{
        const json_t *names = json_object_get(doc, "cpu_off_workers_by_name"), *g;
        double total = 0;
        size_t i;

        json_array_foreach(names, i, g)
                total += json_real_value(json_object_get(g, "share"));
        if (total < 0.1)
                return;
        fputs("  on-CPU samples of threads no sample names a worker of, by thread name:", out);
        json_array_foreach(names, i, g) {
                const char *name = json_string_value(json_object_get(g, "name"));
                json_int_t threads = json_integer_value(json_object_get(g, "threads"));

                fprintf(out, "%s %s (%" JSON_INTEGER_FORMAT " thread%s) %.1f%%", i ? "," : "",
                        name && *name ? name : "(no name)", threads, threads == 1 ? "" : "s",
                        json_real_value(json_object_get(g, "share")) * 100);
        }
        fputc('\n', out);
}

/* Threads on no worker that took a tenth or more of the on-CPU samples:
 * where the CPU went outside the runtime's tasks. */
static void print_threads_off_workers(FILE *out, const json_t *doc)
{
        bool header = false;
        size_t i;
        const json_t *t;

        json_array_foreach(json_object_get(doc, "threads_off_workers"), i, t) {
                double share = json_real_value(json_object_get(t, "share"));
                json_int_t tid = json_integer_value(json_object_get(t, "tid"));

                if (share < 0.1)
                        continue;
                if (!header)
                        fputs("  threads no sample names a worker of, by on-CPU samples (the future block_on "
                              "polls, the blocking pool, code outside the runtime; without a plan, any thread):\n",
                              out);
                header = true;
                fprintf(out, "  thread %-7" JSON_INTEGER_FORMAT " %-16s %5.1f%% of the on-CPU samples%s\n", tid,
                        json_string_value(json_object_get(t, "name")), share * 100,
                        in_poll_since_attach(doc, tid) ? ": a worker in one poll since the attach (long polls above)"
                                                       : "");
        }
        print_cpu_off_workers_by_name(out, doc);
}

/* Why a trace has no poll events: no plan, nothing polled while the poll
 * probes were on, or a probe set without them. */
static const char *why_no_polls(const json_t *doc, char *buf, size_t len)
{
        const char *no_plan = json_string_value(json_object_get(doc, "no_plan"));
        const json_t *v;
        size_t i;

        if (no_plan) {
                snprintf(buf, len, "d9d had no probe plan: %s", no_plan);
                return buf;
        }
        json_array_foreach(json_object_get(doc, "probe_sets"), i, v) {
                int mask = d9c_parse_probes(json_string_value(v), NULL);

                if (mask > 0 && (mask & D9_PROBE_POLL))
                        return "no task was polled while recording, with poll probes attached";
        }
        return "the probe set records none";
}

/* The threads a worker id was seen on: "7207, 7209 (tokio-rt-worker)",
 * or each with its name where they differ ("7 main, 9 worker-1"). */
static void print_worker_threads(FILE *out, const json_t *w)
{
        const json_t *threads = json_object_get(w, "threads"), *t;
        const char *common = NULL;
        bool one_name = true;
        size_t i;

        json_array_foreach(threads, i, t) {
                const char *name = json_string_value(json_object_get(t, "name"));

                if (name && common && strcmp(name, common))
                        one_name = false;
                if (name && !common)
                        common = name;
        }
        json_array_foreach(threads, i, t) {
                const char *name = json_string_value(json_object_get(t, "name"));

                fprintf(out, "%s%" JSON_INTEGER_FORMAT "%s%s", i ? ", " : "", json_integer_value(json_object_get(t, "tid")),
                        !one_name && name ? " " : "", !one_name && name ? name : "");
        }
        if (json_is_true(json_object_get(w, "more_threads")))
                fputs(", more", out);
        if (one_name && common)
                fprintf(out, " (%s)", common);
        fputc('\n', out);
}

static void print_tasks(FILE *out, const json_t *doc)
{
        const json_t *t = json_object_get(doc, "tasks");
        char why[512];
        const json_t *alive = json_object_get(t, "alive"), *queued = json_object_get(t, "queued");
        const json_t *polled = json_object_get(t, "being_polled");

        fputs("\nTasks (counted from spawn, terminate, wake and poll events; Tokio's queue depths are not readable from outside)\n", out);
        if (!json_integer_value(json_object_get(t, "seen")) && !json_integer_value(json_object_get(t, "alive_at_start"))) {
                fprintf(out, "  none: the trace has no spawn, terminate or poll events (%s)\n",
                        why_no_polls(doc, why, sizeof(why)));
                return;
        }
        fprintf(out, "  spawned %" JSON_INTEGER_FORMAT ", terminated %" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(t, "spawned")),
                json_integer_value(json_object_get(t, "terminated")));
        if (json_integer_value(json_object_get(t, "blocking_jobs_ended")))
                fprintf(out, " (and %" JSON_INTEGER_FORMAT " blocking-pool jobs ended, no terminate point for them)",
                        json_integer_value(json_object_get(t, "blocking_jobs_ended")));
        fprintf(out, ", seen %" JSON_INTEGER_FORMAT " (%" JSON_INTEGER_FORMAT " first seen polling: alive before the "
                "recording, spawned unseen, or spawn written at the first poll where the build has no spawn point)\n",
                json_integer_value(json_object_get(t, "seen")), json_integer_value(json_object_get(t, "first_seen_polling")));
        fprintf(out, "  alive: at most %" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT " at the end (%" JSON_INTEGER_FORMAT
                " only seen ending count from the start; tasks neither polled nor ended while recording are not counted)\n",
                json_integer_value(json_object_get(alive, "peak")), json_integer_value(json_object_get(alive, "at_end")),
                json_integer_value(json_object_get(t, "alive_at_start")));
        fprintf(out, "  queued (woken or spawned, not yet polled): at most %" JSON_INTEGER_FORMAT "\n",
                json_integer_value(json_object_get(queued, "peak")));
        fprintf(out, "  being polled: at most %" JSON_INTEGER_FORMAT " at once\n",
                json_integer_value(json_object_get(polled, "peak")));
}

void d9ctl_report_print_text(FILE *out, const json_t *doc)
{
        const json_t *meta = json_object_get(doc, "metadata"), *v;
        const char *service = json_string_value(json_object_get(meta, "service"));
        const char *pid = json_string_value(json_object_get(meta, "pid"));
        size_t i;

        fprintf(out, "d9ctl report: %d segment%s, %.3f s", (int)json_integer_value(json_object_get(doc, "segments")),
                json_integer_value(json_object_get(doc, "segments")) == 1 ? "" : "s",
                (double)json_integer_value(json_object_get(doc, "span_ns")) / 1e9);
        if (service)
                fprintf(out, ", %s", service);
        if (pid)
                fprintf(out, " (pid %s)", pid);
        fprintf(out, "; %" JSON_INTEGER_FORMAT " polls, %" JSON_INTEGER_FORMAT " of 1 ms or more\n",
                json_integer_value(json_object_get(doc, "polls")),
                json_integer_value(json_object_get(doc, "polls_over_1ms")));
        /* The shares below are of the time recorded, not of the gaps
         * between recordings, and they mix the recordings' probe sets. */
        if (json_integer_value(json_object_get(doc, "recordings")) > 1)
                fprintf(out, "  %" JSON_INTEGER_FORMAT " recordings, %.3f s from the first event to the last\n",
                        json_integer_value(json_object_get(doc, "recordings")),
                        (double)json_integer_value(json_object_get(doc, "first_to_last_ns")) / 1e9);
        if (json_array_size(json_object_get(doc, "probe_sets")) > 1) {
                fputs("  recordings of different probe sets:", out);
                json_array_foreach(json_object_get(doc, "probe_sets"), i, v)
                        fprintf(out, "%s \"%s\"", i ? "," : "", json_string_value(v));
                fputs(" (report one recording's segments for one set's view)\n", out);
        }
        if (json_is_object(v = json_object_get(doc, "full_detail_windows")))
                fprintf(out, "  full-detail windows (--full-on-stall): %" JSON_INTEGER_FORMAT ", %.3f s of the %.3f s "
                        "recorded: the poll, spawn, terminate, wake and park events, and the counts, shares and "
                        "tasks below taken from them, cover only those windows\n",
                        json_integer_value(json_object_get(v, "windows")),
                        (double)json_integer_value(json_object_get(v, "covered_ns")) / 1e9,
                        (double)json_integer_value(json_object_get(doc, "span_ns")) / 1e9);

        /* Busy is the polls' time: without poll events (the default set)
         * it is not known, and "other" holds the polling too; nor are
         * blocking-pool jobs, which are polls too. */
        bool polls = json_integer_value(json_object_get(doc, "polls")) > 0;
        char none[600], why[512];

        snprintf(none, sizeof(none), "not recorded: the trace has no poll events (%s)", why_no_polls(doc, why, sizeof(why)));
        print_polls(out, "Longest polls (what ran: the deepest CPU sample inside the poll, else where it was switched out)",
                    json_object_get(doc, "longest_polls"), "cpu_samples", polls ? "none" : none);
        if (json_integer_value(json_object_get(doc, "long_polls_from_stacks_total")) || !polls)
                print_long_polls(out, doc);
        /* The default set's blocked polls are among the long polls from
         * stacks (how: blocked): "none" here read as none blocked. */
        print_polls(out, "Blocking inside polls (the poll's thread was descheduled here)",
                    json_object_get(doc, "blocking_in_polls"), "offcpu_samples",
                    polls ? "none" : "not recorded without poll events: see the long polls from stacks above "
                    "(\"blocked\")");

        fputs("\nLongest wake-to-poll delays", out);
        /* Sampled wakes: a delay is only seen from a wake inside a window. */
        if (json_is_object(v = json_object_get(doc, "wake_windows")))
                fprintf(out, " (wakes sampled: attached in %" JSON_INTEGER_FORMAT " windows, %.3f s of the %.3f s "
                        "recorded; a delay whose wake fell outside them is not seen)",
                        json_integer_value(json_object_get(v, "windows")),
                        (double)json_integer_value(json_object_get(v, "attached_ns")) / 1e9,
                        (double)json_integer_value(json_object_get(doc, "span_ns")) / 1e9);
        fputs("\n", out);
        print_rows(out, json_object_get(doc, "longest_wake_to_poll"), "delay_ns", true,
                   "none (no wake events in the trace)");
        fprintf(out, "\nLongest blocking-pool jobs (spawn_blocking and the like: not on a worker; %" JSON_INTEGER_FORMAT
                " in all)\n", json_integer_value(json_object_get(doc, "blocking_pool_jobs")));
        print_rows(out, json_object_get(doc, "longest_blocking_pool_jobs"), "duration_ns", false, polls ? "none" : none);
        fprintf(out, "\nWorkers (share of the %s%s)\n  worker  polls      busy   parked  other  sched wait   threads\n",
                json_is_object(json_object_get(doc, "full_detail_windows")) ? "full-detail windows' time" : "recording",
                polls ? "" : "; no poll events, so busy is unknown and other includes polling");
        json_array_foreach(json_object_get(doc, "workers"), i, v) {
                double busy = json_real_value(json_object_get(v, "busy_share")) * 100;
                double parked = json_real_value(json_object_get(v, "parked_share")) * 100;
                double other = 100 - busy - parked;
                char n[24], b[16];

                snprintf(n, sizeof(n), "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(v, "polls")));
                snprintf(b, sizeof(b), "%5.1f%%", busy);
                fprintf(out, "  %-6d  %-9s %6s  %6.1f%%  %5.1f%%  %8.3f ms  ",
                        (int)json_integer_value(json_object_get(v, "worker")), polls ? n : "-", polls ? b : "-",
                        parked, other < 0 ? 0 : other, ms(v, "sched_wait_ns"));
                print_worker_threads(out, v);
        }
        const json_t *short_off = json_object_get(doc, "missing");
        json_int_t shorts = json_integer_value(json_object_get(short_off, "short_offcpu_intervals"));
        const char *plan = json_string_value(json_object_get(json_object_get(doc, "metadata"), "probe_plan"));
        /* Parks from sched_switch (stripped builds, the default set: no
         * park uprobe attached) leave out sleeps under the minimum: they
         * are in "other". */
        if (json_array_size(json_object_get(doc, "workers")) && shorts && !(plan && strstr(plan, "park=")))
                fprintf(out, "  other: spinning, stealing, preempted outside polls, and off-CPU intervals under the "
                        "recording's minimum (%" JSON_INTEGER_FORMAT " in the process, %.1f ms in all, counted, not "
                        "per thread)\n", shorts, ms(short_off, "short_offcpu_ns"));
        const char *no_plan = json_string_value(json_object_get(doc, "no_plan"));
        if (!json_array_size(json_object_get(doc, "workers")) && no_plan)
                fprintf(out, "  none: d9d had no probe plan for this process, so no thread can be told a worker "
                        "(%s)\n", no_plan);
        else if (!json_array_size(json_object_get(doc, "workers")))
                fputs("  none: no event in the trace names a worker (idle workers that never woke, or no "
                      "thread seen in a worker loop)\n", out);
        const char *by_thread = json_string_value(json_object_get(json_object_get(doc, "metadata"), "worker_ids_by_thread"));
        if (json_array_size(json_object_get(doc, "workers")) && by_thread)
                fprintf(out, "  %s worker id%s a thread's, not one of Tokio's workers (no Worker found on its stacks): "
                        "right for a current-thread runtime; a multi-thread worker whose core moves between threads "
                        "(block_in_place) then shows as several ids%s\n", by_thread, strcmp(by_thread, "1") ? "s are" : " is",
                        polls ? "" : ", and without task events runtimes are not told apart (--probes all tells both)");
        print_threads_off_workers(out, doc);

        print_tasks(out, doc);
        print_process(out, json_object_get(doc, "process"));

        const json_t *m = json_object_get(doc, "missing");
        fprintf(out, "\nNot in the trace: %" JSON_INTEGER_FORMAT " events lost (ring full), %" JSON_INTEGER_FORMAT
                " off-CPU intervals under the recording minimum (%.3f ms in all)",
                json_integer_value(json_object_get(m, "lost_events")),
                json_integer_value(json_object_get(m, "short_offcpu_intervals")), ms(m, "short_offcpu_ns"));
        json_int_t stacks = json_integer_value(json_object_get(m, "stacks_over_unwind_budget"));
        json_int_t sampler = json_integer_value(json_object_get(m, "resource_samples_lost"));
        json_int_t other = json_integer_value(json_object_get(m, "lost_other"));
        json_int_t poll_ends = json_integer_value(json_object_get(m, "poll_ends_lost"));
        if (stacks)
                fprintf(out, "; %" JSON_INTEGER_FORMAT " samples without their stack (d9d's unwind budget used up)",
                        stacks);
        /* Cut stacks are marked in each stack; said here too, or only
         * status --json told how many (npm anvil, default set: 8,390 of
         * 20,714). */
        json_int_t cut = json_integer_value(json_object_get(m, "stacks_cut"));
        json_int_t capped = json_integer_value(json_object_get(m, "stacks_at_frame_cap"));
        json_int_t by_rate = json_integer_value(json_object_get(m, "stacks_cut_by_byte_rate"));
        json_int_t for_room = json_integer_value(json_object_get(m, "stacks_cut_for_ring_room"));
        if (cut || capped)
                fprintf(out, "; of %" JSON_INTEGER_FORMAT " samples' stacks, %" JSON_INTEGER_FORMAT " end short of "
                        "their callers (beyond the stack bytes copied",
                        json_integer_value(json_object_get(m, "samples")), cut);
        /* Said apart: a larger stack_deep_rate would have copied these
         * whole (npm steady: 852 of 861 cuts), the others lie beyond
         * what a deep copy takes, or its thread was not yet deep. */
        if ((cut || capped) && by_rate)
                fprintf(out, "; %" JSON_INTEGER_FORMAT " of them because the deep copies' byte rate, "
                        "stack_deep_rate, was used up", by_rate);
        if ((cut || capped) && for_room)
                fprintf(out, "; %" JSON_INTEGER_FORMAT " of them because a deep copy would have filled the ring "
                        "past half (d9d was not draining it fast enough)", for_room);
        if (cut || capped)
                fprintf(out, ") and %" JSON_INTEGER_FORMAT " at the frame cap", capped);
        if (sampler)
                fprintf(out, "; %" JSON_INTEGER_FORMAT " process resource samples lost", sampler);
        if (poll_ends)
                fprintf(out, "; %" JSON_INTEGER_FORMAT " polls' ends among the lost records (each ends at its start; "
                        "a blocking job's is left out)",
                        poll_ends);
        if (other)
                fprintf(out, "; %" JSON_INTEGER_FORMAT " records lost from an unknown source", other);
        json_int_t unseen = json_integer_value(json_object_get(m, "offcpu_intervals_unseen"));
        if (unseen)
                fprintf(out, "; %" JSON_INTEGER_FORMAT " off-CPU intervals not seen (a thread switched in with no "
                        "switch-out seen before it)", unseen);
        if (json_integer_value(json_object_get(m, "polls_not_kept")) ||
            json_integer_value(json_object_get(m, "samples_not_kept")))
                fprintf(out, "; over this report's bound: %" JSON_INTEGER_FORMAT " long polls, %" JSON_INTEGER_FORMAT
                        " samples not analysed", json_integer_value(json_object_get(m, "polls_not_kept")),
                        json_integer_value(json_object_get(m, "samples_not_kept")));
        fputs("\n", out);
}
