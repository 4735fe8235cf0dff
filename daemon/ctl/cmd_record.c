/* d9ctl record: attach for a while, wait until every segment is sealed,
 * then print the sealed paths (copied into --out DIR/SERVICE/INSTANCE if
 * given), one per line. Progress goes to stderr: what could not be
 * attached first, then elapsed / remaining time and the event rate.
 *
 * `record -- CMD ARGS` traces a command from its first instruction without
 * ptrace: the child is forked and blocks on a pipe; d9d plans the probes
 * from CMD's executable file and attaches them with the child's pid as
 * filter (uprobes follow the pid through exec); only then is the child
 * released to exec CMD. With --follow-children, CMD is a launcher: it runs
 * at once and the first Tokio process it execs or starts is attached
 * (mid-run, as with --pid). Either way recording lasts until CMD exits
 * (or --duration), and d9ctl exits with CMD's status. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "d9ctl.h"
#include "proto/d9control.h"
#include "proto/d9proto.h"
#include "record_child.h"

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
        interrupted = 1;
}

struct recording {
        int pid;
        uint64_t duration_ms;           /* 0: until CMD exits / the target exits / Ctrl-C */
        const char *out_dir;
        struct record_child child;      /* child.pid 0: --pid */
        bool follow;
        bool tty;                       /* stderr is a terminal: redraw one progress line */
        bool progress_shown;
        bool plan_told;                 /* the plan's warnings printed (or none to wait for) */
        uint64_t started_ms, last_line_ms, rate_ms;
        long long rate_events;
        double rate;
};

/* Copies src to name inside the directory open on dir_fd. Whatever is at
 * name (a symlink someone planted there, to /etc/... say) is removed, never
 * followed: the new file is created O_EXCL|O_NOFOLLOW. */
static int copy_file(const char *src, int dir_fd, const char *name)
{
        char buf[1 << 16];
        int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), out, r = 0;
        ssize_t n;

        if (in < 0)
                return -errno;
        if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT) {
                r = -errno;
                close(in);
                return r;
        }
        out = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
        if (out < 0) {
                r = -errno;
                close(in);
                return r;
        }
        while ((n = d9_read_full(in, buf, sizeof(buf), -1)) > 0 && (r = d9_write_all(out, buf, (size_t)n)) == 0)
                ;
        if (n < 0)
                r = (int)n;
        if (!r && fsync(out) < 0)
                r = -errno;
        close(in);
        close(out);
        return r;
}

/* "SERVICE/INSTANCE" of a session folder TRACES/SERVICE/INSTANCE, the layout
 * serve expects, kept under --out. */
static void session_subdir(const char *dir, char *out, size_t n)
{
        const char *inst = strrchr(dir, '/'), *svc = inst;

        while (svc && svc > dir && svc[-1] != '/')
                svc--;
        snprintf(out, n, "%s", inst && svc && svc < inst ? svc : "unknown/unknown");
}

/* One level of --out: created or opened without following a symlink, and
 * refused unless owned by us (or root) and not writable by others. */
static int open_out_level(int at, const char *name)
{
        struct stat st;
        int fd;

        if (mkdirat(at, name, 0755) < 0 && errno != EEXIST)
                return -errno;
        fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || (st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 0022)) {
                close(fd);
                return -EPERM;
        }
        return fd;
}

/* --out DIR, then SERVICE and INSTANCE under it, each level checked. */
static int open_out_dir(const char *out_dir, const char *sub)
{
        char rest[PATH_MAX], *save = NULL;
        int fd = open_out_level(AT_FDCWD, out_dir);

        snprintf(rest, sizeof(rest), "%s", sub);
        for (char *part = strtok_r(rest, "/", &save); fd >= 0 && part; part = strtok_r(NULL, "/", &save)) {
                int next = strcmp(part, "..") && strcmp(part, ".") ? open_out_level(fd, part) : -EINVAL;
                close(fd);
                fd = next;
        }
        return fd;
}

/* --out DIR, made with any missing parents and checked like the levels
 * under it, before anything is recorded: found unusable only at the end,
 * it left the recording in d9d's state directory and the user with an
 * error. */
static int prepare_out_dir(const char *out_dir)
{
        char path[PATH_MAX];
        int fd;

        if (snprintf(path, sizeof(path), "%s", out_dir) >= (int)sizeof(path))
                return -ENAMETOOLONG;
        for (char *slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
                *slash = '\0';
                if (mkdir(path, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *slash = '/';
        }
        fd = open_out_level(AT_FDCWD, path);
        if (fd < 0)
                return fd;
        close(fd);
        return 0;
}

static void out_path(const struct recording *rec, const char *session_dir, char *out, size_t n)
{
        char sub[PATH_MAX];

        session_subdir(session_dir, sub, sizeof(sub));
        /* Both parts are paths d9d and the user made; an over-long join
         * names nothing rather than a cut-off path. */
        if (snprintf(out, n, "%s/%s", rec->out_dir, sub) >= (int)n)
                out[0] = '\0';
}

static int emit_paths(const struct recording *rec, const json_t *final)
{
        const json_t *sealed = json_object_get(final, "sealed"), *p;
        char dir[PATH_MAX], sub[PATH_MAX];
        size_t i;
        int rc = 0, r, dir_fd = -1;

        if (rec->out_dir) {
                const char *session_dir = json_string_value(json_object_get(final, "dir"));
                out_path(rec, session_dir, dir, sizeof(dir));
                session_subdir(session_dir, sub, sizeof(sub));
                if ((dir_fd = open_out_dir(rec->out_dir, sub)) < 0) {
                        fprintf(stderr, "d9ctl record: cannot use %s as --out: %s; the recording stays where "
                                "d9d sealed it:\n", dir,
                                dir_fd == -EPERM ? "not a directory of yours that only you can write" :
                                strerror(-dir_fd));
                        json_array_foreach(sealed, i, p)
                                fprintf(stderr, "  %s\n", json_string_value(p));
                        return 1;
                }
        }
        json_array_foreach(sealed, i, p) {
                const char *src = json_string_value(p), *base = strrchr(src, '/');
                char dst[PATH_MAX + 64];

                if (!rec->out_dir) {
                        printf("%s\n", src);
                        continue;
                }
                base = base ? base + 1 : src;
                snprintf(dst, sizeof(dst), "%s/%s", dir, base);
                r = copy_file(src, dir_fd, base);
                if (r < 0) {
                        fprintf(stderr, "d9ctl record: copying %s to %s failed: %s\n", src, dst, strerror(-r));
                        rc = 1;
                        continue;
                }
                printf("%s\n", dst);
        }
        if (dir_fd >= 0)
                close(dir_fd);
        return rc;
}

static json_t *session_status(json_int_t session)
{
        json_t *req = d9c_request("status"), *resp, *t;

        json_object_set_new(req, "session", json_integer(session));
        resp = d9ctl_call(req);
        if (!resp)
                return NULL;
        t = json_incref(json_array_get(json_object_get(resp, "targets"), 0));
        json_decref(resp);
        return t;
}

/* Quiet: the session may have ended by itself in the meantime. */
static void detach(int pid)
{
        json_t *req = d9c_request("detach");
        int fd = d9c_connect(d9ctl_socket_path()), err = 0;

        json_object_set_new(req, "pid", json_integer(pid));
        if (fd >= 0) {
                json_decref(d9c_call(fd, req, &err));
                close(fd);
        }
        json_decref(req);
}

/* Everything the plan says will not be recorded, before recording starts. */
static void warn_missing(const json_t *plan)
{
        const json_t *item;
        size_t i;

        json_array_foreach(json_object_get(plan, "missing"), i, item) {
                const char *kind = json_string_value(json_object_get(item, "kind"));
                json_int_t n = kind ? json_integer_value(json_object_get(json_object_get(plan, "attached"), kind)) : 0;

                /* Some of that kind attached (stripped sqld: 353 of 500
                 * completes): "no complete probes" would say none are. */
                if (n)
                        fprintf(stderr, "d9ctl record: warning: %" JSON_INTEGER_FORMAT " %s probes attached, "
                                "not all: %s\n", n, kind, json_string_value(json_object_get(item, "reason")));
                else
                        fprintf(stderr, "d9ctl record: warning: no %s probes: %s\n", kind,
                                json_string_value(json_object_get(item, "reason")));
        }
        json_array_foreach(json_object_get(plan, "skipped"), i, item) {
                const char *why = json_string_value(json_object_get(item, "reason"));
                if (why && strstr(why, "optional poll-end mode"))
                        continue; /* alternatives not needed, nothing lost */
                fprintf(stderr, "d9ctl record: warning: %s probe %s not attached: %s\n",
                        json_string_value(json_object_get(item, "kind")),
                        json_string_value(json_object_get(item, "label")), why ? why : "");
        }
}

/* One progress report: redrawn in place on a terminal, a line every 2 s
 * otherwise (logs, CI). */
static void progress(struct recording *rec, const json_t *t)
{
        uint64_t now = d9_now_ms(), elapsed = now - rec->started_ms;
        long long events = json_integer_value(json_object_get(t, "events"));
        char el[32], rem[48] = "";

        if (now - rec->rate_ms >= 1000) {
                rec->rate = (double)(events - rec->rate_events) * 1000.0 / (double)(now - rec->rate_ms);
                rec->rate_events = events;
                rec->rate_ms = now;
        }
        if (!rec->tty && now - rec->last_line_ms < 2000)
                return;
        if (rec->tty && now - rec->last_line_ms < 250)
                return;
        rec->last_line_ms = now;
        d9ctl_format_duration(elapsed, el, sizeof(el));
        if (rec->duration_ms) {
                char r[32];
                d9ctl_format_duration(elapsed < rec->duration_ms ? rec->duration_ms - elapsed : 0, r, sizeof(r));
                snprintf(rem, sizeof(rem), ", %s left", r);
        } else {
                snprintf(rem, sizeof(rem), ", until %s", rec->child.pid ? "the command exits" : "Ctrl-C");
        }
        /* While the plan is built, the Tokio records wait for it and are
         * not events yet: "1 events (0/s)" read as nothing seen (nushell,
         * a plan of 0.8-1.9 s under load). */
        const json_t *plan = json_object_get(t, "plan");
        char held[64] = "";
        if (json_is_integer(json_object_get(plan, "held")))
                snprintf(held, sizeof(held), " (planning: %" JSON_INTEGER_FORMAT " records held for the plan)",
                         json_integer_value(json_object_get(plan, "held")));
        fprintf(stderr, "%sd9ctl record: pid %d %s %s%s: %lld events (%.0f/s)%s, %lld drops, %lld segments sealed%s",
                rec->tty ? "\r\033[K" : "", rec->pid, json_string_value(json_object_get(t, "state")), el, rem, events,
                rec->rate, held, (long long)json_integer_value(json_object_get(t, "drops")),
                (long long)json_integer_value(json_object_get(t, "segments")), rec->tty ? "" : "\n");
        rec->progress_shown = true;
}

static void progress_end(struct recording *rec)
{
        if (rec->tty && rec->progress_shown)
                fputc('\n', stderr);
        rec->progress_shown = false;
}

/* A plan d9d builds while it records (status "plan": "pending" at the
 * attach): its warnings once it has landed, or why there is none. */
static void warn_plan_once(struct recording *rec, const json_t *t)
{
        const json_t *plan = json_object_get(t, "plan");
        const char *state = json_string_value(json_object_get(plan, "state"));
        const char *err = json_string_value(json_object_get(plan, "error"));

        if (rec->plan_told || (state && !strcmp(state, "pending")))
                return;
        rec->plan_told = true;
        progress_end(rec);
        if (err)
                fprintf(stderr, "d9ctl record: warning: %s\n", err);
        warn_missing(json_object_get(t, "probe_plan"));
}

/* Poll until the session is sealed. Returns the final status or NULL. */
static json_t *wait_sealed(struct recording *rec, json_int_t session)
{
        bool detached = false;

        for (;;) {
                json_t *t = session_status(session);
                const char *state;

                if (!t) {
                        progress_end(rec);
                        fprintf(stderr, "d9ctl record: d9d lost the session for pid %d\n", rec->pid);
                        return NULL;
                }
                warn_plan_once(rec, t);
                state = json_string_value(json_object_get(t, "state"));
                if (state && !strcmp(state, "done")) {
                        progress_end(rec);
                        return t;
                }
                progress(rec, t);
                json_decref(t);
                /* Reap, so d9d sees the target gone; a launcher exiting ends
                 * the recording of what it started. */
                bool cmd_done = rec->child.pid && d9ctl_record_child_reap(&rec->child, false) && !rec->duration_ms &&
                                rec->pid != rec->child.pid; /* else d9d sees the exit itself */
                if ((interrupted || cmd_done) && !detached) {
                        progress_end(rec);
                        if (interrupted)
                                fprintf(stderr, "d9ctl record: interrupted, detaching from pid %d\n", rec->pid);
                        detach(rec->pid);
                        detached = true;
                }
                poll(NULL, 0, 200);
        }
}

/* --follow-children: run the launcher and wait for its Tokio process. */
static int find_followed(struct recording *rec)
{
        d9ctl_record_child_release(&rec->child);
        for (;;) {
                pid_t pid = d9ctl_record_child_find_tokio(&rec->child);
                if (pid > 0) {
                        fprintf(stderr, "d9ctl record: following pid %d, started by %s\n", pid, rec->child.exe);
                        return pid;
                }
                if (d9ctl_record_child_reap(&rec->child, false)) {
                        fprintf(stderr, "d9ctl record: %s exited (status %d) without starting a Tokio process\n",
                                rec->child.exe, d9ctl_record_child_exit_code(&rec->child));
                        return -1;
                }
                if (interrupted)
                        return -1;
                poll(NULL, 0, 20);
        }
}

static int usage_error(const char *msg)
{
        return d9ctl_usage_error("record", "%s", msg);
}

/* The recording is over (final: its session's last status, or NULL). */
static void stop_child(struct recording *rec, json_t *final)
{
        const char *why = json_string_value(json_object_get(final, "end_reason"));

        if (!rec->child.pid || d9ctl_record_child_reap(&rec->child, false))
                return;
        /* The followed process ended by itself: its launcher (npm's node
         * script) finishes its work and says how it went, as perf record
         * -- CMD waits for CMD. Stopping it passed on 0 for the launcher's
         * status. Ctrl-C stops the wait. */
        if (rec->pid != rec->child.pid && why && !strcmp(why, "target exited"))
                while (!interrupted && !d9ctl_record_child_reap(&rec->child, false))
                        poll(NULL, 0, 20);
        if (d9ctl_record_child_reap(&rec->child, false))
                return;
        fprintf(stderr, "d9ctl record: recording over; stopping %s (pid %d)\n", rec->child.exe, rec->child.pid);
        if (rec->pid != rec->child.pid)
                kill(rec->pid, SIGTERM);
        kill(rec->child.pid, SIGTERM);
        d9ctl_record_child_reap(&rec->child, true);
        rec->child.status = 0; /* stopped by us: not the command's failure */
}

static void fail_child(struct recording *rec)
{
        if (!rec->child.pid || d9ctl_record_child_reap(&rec->child, false))
                return;
        kill(rec->child.pid, SIGKILL);
        d9ctl_record_child_reap(&rec->child, true);
}

int d9ctl_cmd_record(int argc, char **argv)
{
        static const struct option opts[] = {
                { "pid", required_argument, NULL, 'p' },
                { "duration", required_argument, NULL, 'd' },
                { "out", required_argument, NULL, 'o' },
                { "probes", required_argument, NULL, 'P' },
                { "offcpu-min", required_argument, NULL, 'O' },
                { "wakes", required_argument, NULL, 'W' },
                { "follow-children", no_argument, NULL, 'f' },
                D9CTL_SAMPLE_OPTIONS,
                {},
        };
        struct recording rec = { .child.go_fd = -1, .tty = isatty(STDERR_FILENO) };
        const char *probes = "default";
        int64_t offcpu_min_us = -1;     /* -1: d9d's own setting */
        const char *wakes = NULL;       /* NULL: d9d's default (sampled) */
        int opt, rc;
        json_t *req, *resp, *final, *t;
        /* --accept-queues, --resources-interval, until req exists */
        __attribute__((cleanup(json_decrefp))) json_t *samples = json_object();

        while ((opt = getopt_long(argc, argv, "+p:d:o:P:O:W:fAR:F:", opts, NULL)) != -1) {
                switch (opt) {
                case 'p':
                        if ((rec.pid = d9ctl_parse_pid("record", optarg)) < 0)
                                return 2;
                        break;
                case 'd':
                        if (d9_parse_duration_ms(optarg, &rec.duration_ms) < 0 || !rec.duration_ms)
                                return usage_error("bad --duration (e.g. 10s, 500ms, 5m)");
                        break;
                case 'o': rec.out_dir = optarg; break;
                case 'P':
                        if (d9c_parse_probes(optarg, NULL) < 0)
                                return usage_error("bad --probes (any of sched,cpu,park,poll,spawn,wake,terminate,longpoll, default or all)");
                        probes = optarg;
                        break;
                case 'O':
                        if ((offcpu_min_us = d9ctl_parse_offcpu_min("record", optarg)) < 0)
                                return 2;
                        break;
                case 'W':
                        if (strcmp(optarg, "exact") && strcmp(optarg, "sampled"))
                                return usage_error("bad --wakes (exact or sampled)");
                        wakes = optarg;
                        break;
                case 'f': rec.follow = true; break;
                case 'A': case 'R': case 'F':
                        if (d9ctl_set_sample_option("record", samples, opt, optarg) < 0)
                                return 2;
                        break;
                default: return 2; /* getopt named the option */
                }
        }
        if ((rec.pid != 0) == (optind < argc))
                return usage_error("give either --pid N or -- CMD [ARGS]");
        if (rec.follow && rec.pid)
                return usage_error("--follow-children needs -- CMD");
        if (rec.out_dir && (rc = prepare_out_dir(rec.out_dir)) < 0) {
                fprintf(stderr, "d9ctl record: cannot use %s as --out: %s; nothing recorded\n", rec.out_dir,
                        rc == -EPERM ? "not a directory of yours that only you can write" : strerror(-rc));
                return 1;
        }
        req = d9c_request("attach");
        json_object_update(req, samples);
        signal(SIGINT, on_interrupt);
        signal(SIGTERM, on_interrupt);
        if (optind < argc) {
                char *why;

                if (d9ctl_record_resolve_command(argv[optind], rec.child.exe) < 0) {
                        json_decref(req);
                        fprintf(stderr, "d9ctl record: command not found: %s\n", argv[optind]);
                        return 127;
                }
                if (!rec.follow && (why = d9ctl_record_not_elf(rec.child.exe))) {
                        json_decref(req);
                        fprintf(stderr, "d9ctl record: %s\n", why);
                        free(why);
                        return 1;
                }
                /* Opened here, with our own rights, and inherited by the held
                 * child (closed by its exec): d9d reads the executable through
                 * the child's descriptor, never by a path we name. */
                int exe_fd = -1;
                if (!rec.follow && (exe_fd = open(rec.child.exe, O_RDONLY | O_CLOEXEC)) < 0) {
                        json_decref(req);
                        fprintf(stderr, "d9ctl record: cannot open %s: %s\n", rec.child.exe, strerror(errno));
                        return 126;
                }
                int r = d9ctl_record_child_spawn(&rec.child, argv + optind);
                if (exe_fd >= 0)
                        close(exe_fd);
                if (r < 0) {
                        json_decref(req);
                        fprintf(stderr, "d9ctl record: cannot start %s: %s\n", rec.child.exe, strerror(-r));
                        return 1;
                }
                if (rec.follow) {
                        rec.pid = find_followed(&rec);
                        if (rec.pid < 0) {
                                json_decref(req);
                                fail_child(&rec);
                                d9ctl_record_child_reap(&rec.child, true);
                                rc = d9ctl_record_child_exit_code(&rec.child);
                                return rc ? rc : 1;
                        }
                } else {
                        rec.pid = rec.child.pid;
                        json_object_set_new(req, "exe_fd", json_integer(exe_fd));
                }
        }
        json_object_set_new(req, "pid", json_integer(rec.pid));
        if (rec.duration_ms)
                json_object_set_new(req, "duration_ms", json_integer((json_int_t)rec.duration_ms));
        json_object_set_new(req, "probes", json_string(probes));
        if (offcpu_min_us >= 0)
                json_object_set_new(req, "offcpu_min_us", json_integer((json_int_t)offcpu_min_us));
        if (wakes)
                json_object_set_new(req, "wakes", json_string(wakes));
        char *why = NULL;
        resp = d9ctl_call_quiet(req, &why);
        if (!resp) {
                /* A launcher's child may be over before d9d could attach:
                 * say that rather than d9d's "no process". */
                if (rec.follow && (kill(rec.pid, 0) < 0 || (why && strstr(why, "no process"))))
                        fprintf(stderr, "d9ctl record: pid %d exited before d9d could attach (attaching takes a "
                                "few hundred ms); nothing recorded\n", rec.pid);
                else if (rec.child.pid && !rec.follow && why && strstr(why, "not a Tokio binary"))
                        fprintf(stderr, "d9ctl: %s (if it starts one, add --follow-children)\n", why);
                else
                        fprintf(stderr, "d9ctl: %s\n", why ? why : "out of memory");
                free(why);
                if (!rec.follow) { /* held before exec: it never ran */
                        fail_child(&rec);
                        return 1;
                }
                d9ctl_record_child_reap(&rec.child, true); /* a launcher finishes its work */
                rc = d9ctl_record_child_exit_code(&rec.child);
                return rc ? rc : 1;
        }
        t = json_object_get(resp, "target");
        json_int_t session = json_integer_value(json_object_get(t, "session"));
        const char *dir = json_string_value(json_object_get(t, "dir"));
        char where[PATH_MAX + 64], dur[32];
        if (rec.out_dir)
                out_path(&rec, dir, where, sizeof(where));
        else
                snprintf(where, sizeof(where), "%s", dir);
        fprintf(stderr, "d9ctl record: recording pid %d (%s) %s%s into %s\n", rec.pid,
                json_string_value(json_object_get(t, "service")), rec.duration_ms ? "for " : "until ",
                rec.duration_ms ? d9ctl_format_duration(rec.duration_ms, dur, sizeof(dur)) :
                rec.child.pid ? "the command exits" : "it exits or Ctrl-C", where);
        warn_plan_once(&rec, t);
        if (!rec.plan_told)
                fprintf(stderr, "d9ctl record: the probe plan is being built while this records; what it "
                        "cannot probe follows when it is ready, if anything\n");
        json_decref(resp);
        rec.started_ms = rec.rate_ms = d9_now_ms();
        rec.last_line_ms = rec.tty ? 0 : rec.started_ms; /* first plain line after 2 s */
        d9ctl_record_child_release(&rec.child);
        final = wait_sealed(&rec, session);
        stop_child(&rec, final);
        if (!final) {
                fail_child(&rec);
                return 1;
        }
        fprintf(stderr, "d9ctl record: pid %d: %s; %lld events, %lld drops\n", rec.pid,
                json_string_value(json_object_get(final, "end_reason")),
                (long long)json_integer_value(json_object_get(final, "events")),
                (long long)json_integer_value(json_object_get(final, "drops")));
        rc = emit_paths(&rec, final);
        if (!json_array_size(json_object_get(final, "sealed"))) {
                fprintf(stderr, "d9ctl record: no segment was sealed for pid %d\n", rec.pid);
                rc = 1;
        }
        json_decref(final);
        if (rec.child.pid) {
                /* The command's own status wins, as with perf record -- CMD. */
                d9ctl_record_child_reap(&rec.child, true);
                int code = d9ctl_record_child_exit_code(&rec.child);
                if (code) {
                        fprintf(stderr, "d9ctl record: %s exited with status %d\n", rec.child.exe, code);
                        return code;
                }
        }
        return rc;
}
