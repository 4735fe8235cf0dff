/* d9d: the tracing daemon. Reads its configuration, recovers segments a
 * crash left open, then runs one epoll loop over the control socket, every
 * target's ring buffer, a tick timer and signals until SIGTERM, which seals
 * everything before exiting. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/d9d.h"
#include "daemon/ship/ship.h"
#include "daemon/symbolize/debuginfo.h"
#include "daemon/symbolize/kallsyms.h"
#include "daemon/core/log.h"
#include "daemon/core/notify.h"
#include "daemon/record/plan_child.h"
#include "daemon/record/autoattach.h"
#include "daemon/record/planner.h"
#include "daemon/record/sampler.h"
#include "daemon/core/preflight.h"
#include "daemon/seal/recover.h"
#include "daemon/seal/sealer.h"
#include "daemon/core/trace_access.h"
#include "daemon/record/session.h"

#define TICK_MS 250
#define TRIM_TICKS 40   /* 10 s */

static void config_reload(struct d9d *d);

static void on_signal(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct signalfd_siginfo si;

        while (read(w->fd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
                        log_info("received %s: sealing every segment and exiting", strsignal((int)si.ssi_signo));
                        d->stopping = true;
                } else if (si.ssi_signo == SIGHUP && !d->stopping) {
                        config_reload(d);
                }
        }
}

static void on_tick(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        uint64_t n, now = d9_now_ms();
        unsigned live = 0;

        (void)!read(w->fd, &n, sizeof(n));
        for (struct session *s = d->sessions; s; s = s->next) {
                session_tick(s, now);
                live += s->state == SESSION_RECORDING;
        }
        sessions_prune(d);
        session_bpf_reap();
        autoattach_tick(d->autoattach);
        /* Sealing (symbols, compression) runs in the sealer thread's own
         * malloc arena, which keeps ~10 MiB it no longer uses after each
         * segment; give free pages back every TRIM_TICKS (a few ms at most). */
        static unsigned ticks;
        if (++ticks % TRIM_TICKS == 0) {
                malloc_trim(0);
        }
        static unsigned last_live = ~0u;
        if (live != last_live) {
                d9d_notify_status("tracing %u target%s", live, live == 1 ? "" : "s");
                last_live = live;
        }
}

static void on_watchdog(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        uint64_t n;

        (void)!read(w->fd, &n, sizeof(n));
        d9d_notify_watchdog();
}

static int tick_timer(void)
{
        struct itimerspec its = { .it_interval = { 0, TICK_MS * 1000000L }, .it_value = { 0, TICK_MS * 1000000L } };
        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);

        if (fd >= 0 && timerfd_settime(fd, 0, &its, NULL) < 0) {
                close(fd);
                return -errno;
        }
        return fd < 0 ? -errno : fd;
}

static int signal_fd(void)
{
        sigset_t mask;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        signal(SIGPIPE, SIG_IGN);
        return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

static void usage(FILE *out)
{
        fprintf(out, "usage: d9d [--config FILE] [--state-dir DIR] [--socket PATH] [--foreground]\n"
                     "           [--set KEY=VALUE]...\n");
}

/* The command line, kept: a reload reads the file again and applies the
 * same flags after it, as at start. */
static struct {
        const char *config;
        bool explicit_config;
        const char *keys[64], *values[64];
        int n_sets;
        const char *state, *sock;
} args = { .config = D9D_DEFAULT_CONFIG };

/* Defaults, then the file, then the flags (they beat the file). */
static int config_build(struct d9d_config *cfg, char *err, size_t errlen)
{
        const char *why;

        d9d_config_defaults(cfg);
        if (d9d_config_read(cfg, args.config, args.explicit_config, err, errlen) < 0)
                return -EINVAL;
        for (int i = 0; i < args.n_sets; i++)
                if (d9d_config_set(cfg, args.keys[i], args.values[i], &why) < 0) {
                        snprintf(err, errlen, "--set %s: %s", args.keys[i], why);
                        return -EINVAL;
                }
        if ((args.state && d9d_config_set(cfg, "state_dir", args.state, &why) < 0) ||
            (args.sock && d9d_config_set(cfg, "socket", args.sock, &why) < 0)) {
                snprintf(err, errlen, "bad --state-dir/--socket path");
                return -EINVAL;
        }
        return 0;
}

static int parse_args(int argc, char **argv, struct d9d_config *cfg)
{
        static const struct option opts[] = {
                { "config", required_argument, NULL, 'c' },
                { "state-dir", required_argument, NULL, 'd' },
                { "socket", required_argument, NULL, 's' },
                { "foreground", no_argument, NULL, 'f' },
                { "set", required_argument, NULL, 'o' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        char err[PATH_MAX + 256], *eq;
        bool foreground = false;
        int opt;

        while ((opt = getopt_long(argc, argv, "c:d:s:fo:hV", opts, NULL)) != -1) {
                switch (opt) {
                case 'c': args.config = optarg; args.explicit_config = true; break;
                case 'd': args.state = optarg; break;
                case 's': args.sock = optarg; break;
                case 'f': foreground = true; break;
                case 'o':
                        if (!(eq = strchr(optarg, '='))) {
                                fprintf(stderr, "d9d: --set expects KEY=VALUE, got '%s'\n", optarg);
                                return -EINVAL;
                        }
                        if (args.n_sets < 64) {
                                *eq = 0;
                                args.keys[args.n_sets] = optarg;
                                args.values[args.n_sets++] = eq + 1;
                        }
                        break;
                case 'h': usage(stdout); exit(0);
                case 'V': printf("d9d %s\n", D9_VERSION); exit(0);
                default: usage(stderr); return -EINVAL;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "d9d: unexpected argument '%s'\n", argv[optind]);
                return -EINVAL;
        }
        if (config_build(cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "d9d: %s\n", err);
                return -EINVAL;
        }
        cfg->foreground = foreground;
        return 0;
}

/* SIGHUP: d9d.conf again. Only the attach rules and auto_attach_max are
 * applied (docs/daemon.md "Reloading"); a file that does not parse leaves
 * everything as it was. */
static void config_reload(struct d9d *d)
{
        struct d9d_config next;
        char err[PATH_MAX + 256], keys[512];
        size_t n;

        if (config_build(&next, err, sizeof(err)) < 0) {
                log_error("reload: %s; kept the running configuration", err);
                d9d_config_free(&next);
                return;
        }
        n = d9d_config_restart_keys(&d->cfg, &next, keys, sizeof(keys));
        if (n)
                log_warn("reload: %s changed; %s only applied when d9d restarts (kept the running value%s)", keys,
                         n == 1 ? "it is" : "they are", n == 1 ? "" : "s");
        int r = autoattach_reload(d, &next.attach);
        if (r < 0)
                log_error("reload: the attach rules are in place but auto-attach could not start: %s", strerror(-r));
        log_info("reload: %s: %zu attach rule%s, auto_attach_max %u", args.config, d->cfg.attach.n,
                 d->cfg.attach.n == 1 ? "" : "s", d->cfg.attach.max_targets);
        d9d_config_free(&next);
}

static void shutdown_all(struct d9d *d)
{
        d9d_notify_stopping("sealing segments");
        for (struct session *s = d->sessions; s; s = s->next)
                session_end(s, "d9d stopping");
        sampler_stop(d->sampler);       /* no session samples any more */
        d->sampler = NULL;
        planner_stop(d->planner);       /* attaches still planning are answered and dropped */
        d->planner = NULL;
        planner_stop(d->bpf_worker);    /* and those installing; stops under way finish */
        d->bpf_worker = NULL;
        autoattach_stop(d->autoattach);
        d->autoattach = NULL;
        control_server_stop(d->control);
        sealer_stop(d->sealer); /* seals whatever is queued, then joins */
        if (d->shipper) {
                /* A short grace period; what is left stays queued on disk. */
                if (shipper_flush(d->shipper, 5000) < 0)
                        log_warn("S3 uploads still pending at exit; they resume at the next start");
                shipper_stop(d->shipper);
        }
        sessions_free_all(d);
        session_bpf_close();
        d9d_config_free(&d->cfg);
        log_info("stopped");
}

/* S3 is optional: only when some s3_* key is configured. A half-configured
 * S3 (no bucket, no credentials) is an error at start, not a silent no-op. */
static int start_shipper(struct d9d *d)
{
        static char ship_dir[PATH_MAX];
        const char *why = NULL;
        int r;

        if (!d->cfg.s3_enabled)
                return 0;
        r = s3_config_resolve(&d->cfg.ship.s3, &why);
        if (r < 0) {
                log_error("S3 shipping configured but unusable: %s", why ? why : strerror(-r));
                return r;
        }
        if (!d->cfg.ship.state_dir) {
                snprintf(ship_dir, sizeof(ship_dir), "%.3000s/ship", d->cfg.state_dir);
                d->cfg.ship.state_dir = strdup(ship_dir);
        }
        r = shipper_start(&d->cfg.ship, &d->shipper);
        if (r < 0) {
                log_error("cannot start the S3 shipper: %s", strerror(-r));
                return r;
        }
        sealer_set_shipper(d->sealer, d->shipper);
        log_info("shipping sealed segments to s3://%s", d->cfg.ship.s3.bucket);
        return 0;
}

#define STALL_WINDOW_MS 10000
#define STALL_LOG_MS 250

/* The longest turn of the loop since start, and per 10 s window (the
 * current and the previous one): a turn that long is what every ring
 * buffer had to hold without being drained. */
static struct {
        uint64_t max_ms, window_start_ms, window_max_ms, prev_window_max_ms;
} stall;

/* cpu_ns: the loop thread's CPU time in the turn. A turn that took long
 * on little CPU waited: for a CPU, on a machine whose every core is busy
 * (npm codex under load, d9d at nice 0: 551 ms on CPU and 3,494 ms
 * runnable in one recording; the unit runs it at Nice=-5), or in a call
 * that blocked. The log said only "held", as if the turn's work took it. */
static void loop_stall_note(uint64_t start_ns, uint64_t end_ns, uint64_t cpu_ns)
{
        uint64_t ms = (end_ns - start_ns) / 1000000ull, now = end_ns / 1000000ull;

        if (now - stall.window_start_ms >= STALL_WINDOW_MS) {
                /* A window with nothing noted in it, skipped over, held 0. */
                stall.prev_window_max_ms = now - stall.window_start_ms < 2 * STALL_WINDOW_MS ? stall.window_max_ms : 0;
                stall.window_max_ms = 0;
                stall.window_start_ms = now;
        }
        if (ms > stall.window_max_ms)
                stall.window_max_ms = ms;
        if (ms > stall.max_ms)
                stall.max_ms = ms;
        if (ms >= STALL_LOG_MS)
                log_warn("the drain loop was held %llu ms by one turn of events, %llu ms of it on a CPU%s",
                         (unsigned long long)ms, (unsigned long long)(cpu_ns / 1000000ull),
                         cpu_ns * 2 < end_ns - start_ns ? " (the rest waiting: for a CPU, if every core was busy and "
                                                          "d9d's priority no higher than theirs, or blocked)"
                                                        : "");
}

void d9d_loop_stall(uint64_t *max_ms, uint64_t *recent_max_ms)
{
        uint64_t now = d9_now_ns();

        loop_stall_note(now, now, 0);   /* rolls the window over */
        *max_ms = stall.max_ms;
        *recent_max_ms = stall.window_max_ms > stall.prev_window_max_ms ? stall.window_max_ms
                                                                         : stall.prev_window_max_ms;
}

static int run_loop(struct d9d *d)
{
        struct epoll_event evs[64];

        while (!d->stopping) {
                int n = epoll_wait(d->epfd, evs, 64, -1);
                if (n < 0 && errno != EINTR)
                        return -errno;
                uint64_t t0 = d9_now_ns(), cpu0 = d9_thread_cpu_ns();
                /* Two passes: a watch marked first (exec notices) does not
                 * wait behind the drains of every busy target's ring. */
                for (int pass = 0; pass < 2; pass++)
                        for (int i = 0; i < n; i++) {
                                struct d9_watch *w = evs[i].data.ptr;
                                if (w->first == !pass)
                                        w->fn(d, w, evs[i].events);
                        }
                loop_stall_note(t0, d9_now_ns(), d9_thread_cpu_ns() - cpu0);
        }
        return 0;
}

/* glibc raises its mmap threshold (up to 32 MiB) after a big buffer is
 * freed, after which big buffers come from the arenas and their pages stay
 * with d9d; a fixed threshold hands them back at free(). The teardown
 * threads (bpf_loader.c) would each get an arena of their own: 4 is enough
 * for the drain loop, the sealer and them. */
static void malloc_tune(void)
{
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        mallopt(M_ARENA_MAX, 4);
}

/* <state>/traces: traversed by everyone (each recording uid reaches its own
 * folders through it), listed by d9d and the trace readers group only. */
static void grant_traces_dir(const char *path)
{
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (fd >= 0) {
                d9d_trace_access_grant(fd, 0, true, false);
                close(fd);
        }
}

/* Before any thread starts: the environment is read by libdebuginfod (and
 * libdw) on every lookup. Only the configured servers are asked, so an
 * inherited DEBUGINFOD_URLS does not make d9d reach out by itself. */
static void setup_debug_lookups(struct d9d_config *cfg)
{
        static const char *dirs[32];
        static struct debuginfo_opts opts;
        char cache[PATH_MAX + 32];
        size_t n = 0;

        for (char *p = cfg->debug_dirs, *tok; (tok = strsep(&p, ":")) && n < 32;)
                if (*tok)
                        dirs[n++] = tok;
        if (cfg->debuginfod_urls[0]) {
                setenv("DEBUGINFOD_URLS", cfg->debuginfod_urls, 1);
                snprintf(cache, sizeof(cache), "%s/debuginfod", cfg->state_dir);
                setenv("DEBUGINFOD_CACHE_PATH", cache, 0);
        } else {
                unsetenv("DEBUGINFOD_URLS");
        }
        opts = (struct debuginfo_opts){ .dirs = dirs, .n_dirs = n, .debuginfod = cfg->debuginfod_urls[0] != 0,
                                        .timeout_ms = cfg->debuginfod_timeout_ms };
        debuginfo_setup(&opts);
}

int main(int argc, char **argv)
{
        static struct d9d d;
        struct d9_watch sig_w = { .fn = on_signal }, tick_w = { .fn = on_tick }, wd_w = { .fn = on_watchdog };
        struct preflight_report pf;
        int r;

        if (argc > 1 && strcmp(argv[1], PLAN_CHILD_ARG) == 0)
                return planner_child_main(argc, argv);
        malloc_tune();
        if (parse_args(argc, argv, &d.cfg) < 0)
                return 2;
        gethostname(d.host, sizeof(d.host) - 1);
        if ((size_t)snprintf(d.traces_dir, sizeof(d.traces_dir), "%.3000s/traces", d.cfg.state_dir) >= sizeof(d.traces_dir)) {
                log_error("state directory path too long");
                return 2;
        }
        const char *why = NULL;
        const char *bad = d.cfg.state_dir;

        r = d9d_trace_dir_verify(d.cfg.state_dir, &why);
        if (r == 0) {
                bad = d.traces_dir;
                r = d9d_trace_dir_verify(d.traces_dir, &why);
        }
        if (r < 0) {
                log_error("state directory %s %s: %s", bad, why, strerror(-r));
                return 1;
        }
        if (d9d_trace_access_init(d.cfg.trace_group) < 0 && d.cfg.trace_group_set)
                log_warn("trace_group %s: no such group; traces are readable by their recording uid, d9d and root only",
                         d.cfg.trace_group);
        grant_traces_dir(d.traces_dir);
        d9d_preflight_run(&pf);
        d9d_preflight_log(&pf, stderr, false);
        if (pf.fatal)
                log_warn("preflight found fatal problems: attach requests will fail until they are fixed");

        d.epfd = epoll_create1(EPOLL_CLOEXEC);
        sig_w.fd = signal_fd();
        tick_w.fd = tick_timer();
        if (d.epfd < 0 || sig_w.fd < 0 || tick_w.fd < 0 || d9d_watch_add(&d, &sig_w, EPOLLIN) < 0 ||
            d9d_watch_add(&d, &tick_w, EPOLLIN) < 0) {
                log_error("cannot set up the event loop: %s", strerror(errno));
                return 1;
        }
        wd_w.fd = d9d_notify_watchdog_timerfd();
        if (wd_w.fd >= 0)
                d9d_watch_add(&d, &wd_w, EPOLLIN);
        setup_debug_lookups(&d.cfg);
        r = sealer_start(&d, session_on_sealed, &d.sealer);
        if (r < 0) {
                log_error("cannot start the sealing thread: %s", strerror(-r));
                return 1;
        }
        /* Plans below the drain loop: on a busy machine the loop gets the
         * CPU first. BPF installs and stops at the loop's own priority. */
        r = planner_start(&d, "d9d-planner", 10, &d.planner);
        if (r == 0)
                r = planner_start(&d, "d9d-bpf", 0, &d.bpf_worker);
        if (r < 0) {
                log_error("cannot start the planning threads: %s", strerror(-r));
                return 1;
        }
        r = sampler_start(&d, session_on_sample, &d.sampler);
        if (r < 0) {
                log_error("cannot start the sampling thread: %s", strerror(-r));
                return 1;
        }
        /* Before the first client, while no ring waits to be drained: the
         * verifier's 10-650 ms, which the first attach would pay otherwise,
         * and /proc/kallsyms' 0.1-0.3 s (here rather than on a thread of
         * its own, whose open descriptor raced the fd-limit check of the
         * accept loop). Done before d9d says it is ready, so that it holds
         * its descriptors and memory from then on. */
        if (!pf.fatal && (r = session_bpf_load(&d)) < 0)
                log_warn("cannot load d9's BPF programs: %s (attach will try again; see the preflight log)",
                         strerror(-r));
        ksyms_put(ksyms_get());
        r = start_shipper(&d);
        if (r < 0)
                return 1;
        r = seal_recover_active_segments(d.traces_dir, d.sealer, d.cfg.compression);
        if (r < 0)
                log_error("recovery scan of %s failed: %s", d.traces_dir, strerror(-r));
        r = control_server_start(&d, &d.control);
        if (r < 0)
                return 1;
        r = autoattach_start(&d, &d.autoattach);
        if (r < 0) {
                log_error("cannot start auto-attach: %s", strerror(-r));
                return 1;
        }
        log_info("d9d %s ready: state %s, socket %s", D9_VERSION, d.cfg.state_dir, d.cfg.socket_path);
        d9d_notify_ready("tracing 0 targets");
        r = run_loop(&d);
        shutdown_all(&d);
        return r < 0 ? 1 : 0;
}
