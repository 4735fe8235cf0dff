/* autoattach.c: rule matching on start and on exec, the cap, and the races.
 *
 * - Start-up: the exec watch is attached before /proc is scanned, so a
 *   process that execs during the scan is seen at least once; seen twice,
 *   the second look finds it taken and leaves it.
 * - Exec -> attach: the exec record wakes the loop; the process is matched
 *   from /proc (proc_facts.c) and handed to session_start() at once, whose
 *   plan runs on the planner thread. The latency is kept per session
 *   (exec_to_attach_ms in list and status).
 * - Exits first: a process gone (a zombie too) before /proc could be read is counted
 *   (execs_gone: whether it matched is unknown), one that matched but went
 *   before its attach finished too (exited_first); neither is a failure.
 *   A process in the middle of exit has no executable left but is not yet
 *   reported exited: an attach failing on a live process is judged
 *   EXITING_MS later (aa_judge_failure).
 * - Re-exec: a traced process that execs a matching image again is still
 *   held by its old session until that session drains its exec record; the
 *   new image is retried every RETRY_MS for up to RETRY_FOR_MS.
 * - Threads: exec replaces every thread; the record is of the new leader,
 *   which is the process. Threads that never exec are never seen here.
 * - Lost exec records (a full ring) and targets refused at the cap are
 *   counted and logged; either causes a rescan of /proc once there is
 *   room, so the processes behind them are still attached if they run. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "daemon/core/attach_rules.h"
#include "daemon/core/cleanup.h"
#include "daemon/core/d9d.h"
#include "daemon/core/log.h"
#include "daemon/record/autoattach.h"
#include "daemon/record/exec_watch.h"
#include "daemon/record/proc_facts.h"
#include "daemon/record/session.h"
#include "uprobes/uprobes.h"

#define RETRY_MS 5
#define RETRY_FOR_MS 2000
#define SCAN_BATCH 64           /* /proc entries per loop turn: a scan never stalls the drain loop */
#define CAP_LOG_MS 10000
#define EXITING_MS 50           /* how long a failed attach's process may take to finish exiting */

struct aa_start {
        struct autoattach *aa;
        struct attach_rule *rule;
        pid_t pid;
        int pidfd;
        struct session_start *start;
        struct aa_start *next;
};

struct aa_retry {
        pid_t pid;
        uint64_t exec_ns, until_ms;
        struct aa_retry *next;
};

/* An attach that failed while its process was alive: a process in the
 * middle of exit has lost its executable and maps but is not yet reported
 * exited, so it is judged EXITING_MS later, not at once. */
struct aa_failure {
        struct attach_rule *rule;
        pid_t pid;
        int pidfd;
        char *why;
        uint64_t until_ms;
        struct aa_failure *next;
};

struct autoattach {
        struct d9_watch timer_w;        /* one-shot: retries and scan batches */
        struct d9d *d;
        struct attach_rules *rules;
        struct exec_watch *ew;
        struct aa_start *starting;
        unsigned n_starting;
        struct aa_retry *retries;
        struct aa_failure *failures;
        DIR *scan;                      /* a /proc scan under way */
        bool scan_added_only;           /* it looks for rules added_by_reload only */
        /* What attaches planned under a rule that a reload removed count
         * to (they still finish, sessions keep the rule's text). */
        struct attach_rule removed;
        bool rescan_wanted;
        uint64_t lost_seen;
        uint64_t execs, cap_refused, cap_logged_ms, busy_gave_up, scans;
        uint64_t execs_gone;            /* exited before /proc could be read: matched or not, unknown */
        uint64_t noticed_ns;            /* when the exec record at hand was read (attach timeline) */
};

static void aa_arm(struct autoattach *aa, unsigned ms)
{
        struct itimerspec its = { .it_value = { ms / 1000, (long)(ms % 1000) * 1000000L + 1 } };

        timerfd_settime(aa->timer_w.fd, 0, &its, NULL);
}

static unsigned aa_live(const struct autoattach *aa)
{
        unsigned n = aa->n_starting;

        for (const struct session *s = aa->d->sessions; s; s = s->next)
                n += s->state == SESSION_RECORDING && s->rule[0];
        return n;
}

static bool aa_starting_for(const struct autoattach *aa, pid_t pid)
{
        for (const struct aa_start *st = aa->starting; st; st = st->next)
                if (st->pid == pid)
                        return true;
        return false;
}

/* until_ms 0: the first look at this exec. */
static void aa_retry_add(struct autoattach *aa, pid_t pid, uint64_t exec_ns, uint64_t until_ms)
{
        struct aa_retry *r;

        for (r = aa->retries; r; r = r->next)
                if (r->pid == pid) {
                        r->exec_ns = exec_ns;
                        return;
                }
        r = calloc(1, sizeof(*r));
        if (!r)
                return;
        *r = (struct aa_retry){ pid, exec_ns, until_ms ? until_ms : d9_now_ms() + RETRY_FOR_MS, aa->retries };
        aa->retries = r;
        aa_arm(aa, RETRY_MS);
}

static void aa_cap_refuse(struct autoattach *aa, struct attach_rule *rule, pid_t pid)
{
        uint64_t now = d9_now_ms();

        aa->cap_refused++;
        rule->capped++;
        aa->rescan_wanted = true;
        if (aa->cap_logged_ms && now - aa->cap_logged_ms < CAP_LOG_MS)
                return;
        aa->cap_logged_ms = now;
        log_warn("auto-attach: pid %d matches %s but all %u auto-attach slots are taken (auto_attach_max); "
                 "%llu refused so far, retried when one ends", pid, rule->text, aa->rules->max_targets,
                 (unsigned long long)aa->cap_refused);
}

static void aa_failure_free(struct aa_failure *f)
{
        if (f->pidfd >= 0)
                close(f->pidfd);
        free(f->why);
        free(f);
}

/* exited_first if the process has gone, else a failure once EXITING_MS passed. */
static void aa_judge_failure(struct autoattach *aa, struct attach_rule *rule, pid_t pid, int pidfd,
                             const char *why)
{
        struct aa_failure *f;

        if (d9_pidfd_alive(pidfd) < 0) {
                rule->exited_first++;
                return;
        }
        f = calloc(1, sizeof(*f));
        if (!f || !(f->why = strdup(why)) || (f->pidfd = fcntl(pidfd, F_DUPFD_CLOEXEC, 3)) < 0) {
                if (f)
                        free(f->why);
                free(f);
                rule->failed++;
                log_warn("auto-attach: %s matched pid %d, not attached: %s", rule->text, pid, why);
                return;
        }
        f->rule = rule;
        f->pid = pid;
        f->until_ms = d9_now_ms() + EXITING_MS;
        f->next = aa->failures;
        aa->failures = f;
        aa_arm(aa, RETRY_MS);
}

/* true while some failure is still to be judged. */
static bool aa_failures_due(struct autoattach *aa)
{
        uint64_t now = d9_now_ms();
        struct aa_failure **pp = &aa->failures, *f;

        while ((f = *pp)) {
                bool gone = d9_pidfd_alive(f->pidfd) < 0;

                if (!gone && now < f->until_ms) {
                        pp = &f->next;
                        continue;
                }
                if (gone) {
                        f->rule->exited_first++;
                } else {
                        f->rule->failed++;
                        log_warn("auto-attach: %s matched pid %d, not attached: %s", f->rule->text, f->pid, f->why);
                }
                *pp = f->next;
                aa_failure_free(f);
        }
        return aa->failures != NULL;
}

static void aa_start_free(struct aa_start *st)
{
        struct aa_start **pp = &st->aa->starting;

        while (*pp && *pp != st)
                pp = &(*pp)->next;
        if (*pp)
                *pp = st->next;
        st->aa->n_starting--;
        if (st->pidfd >= 0)
                close(st->pidfd);
        free(st);
}

static void aa_attach_done(void *ctx, struct session *s, const char *why)
{
        struct aa_start *st = ctx;

        if (s) {
                st->rule->attached++;
                if (s->exec_to_attach_ms >= 0)
                        log_info("auto-attach: %s attached pid %d %lld ms after its exec", st->rule->text, st->pid,
                                 (long long)s->exec_to_attach_ms);
                else
                        log_info("auto-attach: %s attached running pid %d", st->rule->text, st->pid);
        } else {
                aa_judge_failure(st->aa, st->rule, st->pid, st->pidfd, why ? why : "attach failed");
        }
        aa_start_free(st);
}

/* A matching process nobody traces: attach as root would, with the rule's probes. */
static void aa_attach(struct autoattach *aa, struct attach_rule *rule, pid_t pid, int pidfd, uint64_t exec_ns,
                      uint64_t until_ms)
{
        struct session_request req = { .pid = pid, .exe_fd = -1, .probes = rule->probes, .offcpu_min_us = -1,
                                       .peer_uid = 0, .rule = rule->text, .exec_ns = exec_ns,
                                       .noticed_ns = aa->noticed_ns };
        struct aa_start *st = calloc(1, sizeof(*st));
        char *why = NULL;
        int r;

        if (!st)
                return;
        *st = (struct aa_start){ aa, rule, pid, fcntl(pidfd, F_DUPFD_CLOEXEC, 3), NULL, aa->starting };
        aa->starting = st;
        aa->n_starting++;
        r = session_start(aa->d, &req, aa_attach_done, st, &st->start, &why);
        if (r == -EBUSY && exec_ns)
                aa_retry_add(aa, pid, exec_ns, until_ms);
        else if (r == -ESRCH)
                rule->exited_first++;
        else if (r == -EAGAIN)
                aa->rescan_wanted = true;       /* the planner's queue is full: later */
        else if (r < 0 && r != -EBUSY)
                aa_judge_failure(aa, rule, pid, pidfd, why ? why : strerror(-r));
        free(why);
        if (r < 0)
                aa_start_free(st);
}

/* Whether pid's current image is traced already: a session attached after
 * this exec, or d9ctl record's child, whose session expects one exec. An
 * older session only ends once it drains the exec record: retry then. */
static bool aa_traced_now(struct autoattach *aa, pid_t pid, uint64_t exec_ns, uint64_t until_ms)
{
        struct session *s = session_find(aa->d, pid, true);

        if (!s)
                return false;
        if (!exec_ns || s->started_ms * 1000000ull >= exec_ns || (s->expect_exec && !s->tr.exec_seen))
                return true;
        aa_retry_add(aa, pid, exec_ns, until_ms);
        return true;
}

/* One process, seen by the scan (exec_ns 0) or by its exec; until_ms: a
 * retry's deadline, 0 at the first look. */
static void aa_consider(struct autoattach *aa, pid_t pid, uint64_t exec_ns, uint64_t until_ms)
{
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        struct attach_rule *rule;
        struct proc_facts f;

        /* Gone, or just exec'd with no exe link left: exiting (its mm is
         * gone) but not a zombie yet. Whether it matched is unknown either
         * way. A retry's process was never counted at its first look. */
        if (pidfd < 0 || proc_facts_read(pid, pidfd, &f) < 0 || (exec_ns && !f.exe[0])) {
                aa->execs_gone += exec_ns != 0;
                return;
        }
        if (!(rule = d9d_attach_rules_match(aa->rules, f.exe, f.cgroup)))
                return;
        /* A reload's scan: what the old rules match was looked at already
         * (and may have been detached on purpose since). */
        if (!exec_ns && aa->scan_added_only && !rule->added_by_reload)
                return;
        if (aa_starting_for(aa, pid)) {
                /* Planned from the image before this exec: try again once it is done. */
                if (exec_ns)
                        aa_retry_add(aa, pid, exec_ns, until_ms);
                return;
        }
        if (aa_traced_now(aa, pid, exec_ns, until_ms))
                return;
        /* Counted once per process (image) it attaches or refuses, not per look. */
        rule->matched++;
        if (aa_live(aa) >= aa->rules->max_targets) {
                aa_cap_refuse(aa, rule, pid);
                return;
        }
        aa_attach(aa, rule, pid, pidfd, exec_ns, until_ms);
}

static void aa_on_exec(void *ctx, pid_t pid, uint64_t ts_ns)
{
        struct autoattach *aa = ctx;

        aa->execs++;
        aa->noticed_ns = d9_now_ns();   /* a retry's look has none */
        if (!aa->d->stopping && aa->rules->n)   /* a reload may have removed every rule */
                aa_consider(aa, pid, ts_ns, 0);
        aa->noticed_ns = 0;
}

static void aa_scan_begin(struct autoattach *aa, bool added_only)
{
        if (aa->scan)
                return;
        aa->scan_added_only = added_only;
        aa->scan = opendir("/proc");
        if (!aa->scan) {
                log_error("auto-attach: cannot list /proc: %m");
                return;
        }
        if (!added_only)
                aa->rescan_wanted = false;
        aa->scans++;
        aa_arm(aa, 0);
}

/* SCAN_BATCH entries of /proc; true when there are more. */
static bool aa_scan_step(struct autoattach *aa)
{
        struct dirent *de;

        for (int i = 0; i < SCAN_BATCH; i++) {
                if (!(de = readdir(aa->scan))) {
                        closedir(aa->scan);
                        aa->scan = NULL;
                        return false;
                }
                char *end;
                long pid = strtol(de->d_name, &end, 10);
                if (*end || pid <= 0 || pid == getpid())
                        continue;
                aa_consider(aa, (pid_t)pid, 0, 0);
        }
        return true;
}

static bool aa_retry_due(struct autoattach *aa)
{
        uint64_t now = d9_now_ms();
        struct aa_retry *list = aa->retries, *r;

        aa->retries = NULL;
        while ((r = list)) {
                list = r->next;
                if (now >= r->until_ms) {
                        aa->busy_gave_up++;
                        log_warn("auto-attach: pid %d exec'd a matching image but stayed held by an attach or "
                                 "session for %d ms; not attached", r->pid, RETRY_FOR_MS);
                } else {
                        /* Re-added by aa_consider if still held. */
                        aa_consider(aa, r->pid, r->exec_ns, r->until_ms);
                }
                free(r);
        }
        return aa->retries != NULL;
}

static void aa_on_timer(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct autoattach *aa = (struct autoattach *)w;
        uint64_t n;
        bool more;

        (void)!read(w->fd, &n, sizeof(n));
        if (d->stopping)
                return;
        more = aa_retry_due(aa);
        more |= aa_failures_due(aa);
        if (aa->scan && aa_scan_step(aa))
                aa_arm(aa, 1);
        else if (more)
                aa_arm(aa, RETRY_MS);
}

void autoattach_tick(struct autoattach *aa)
{
        uint64_t lost;

        if (!aa || aa->d->stopping)
                return;
        lost = aa->ew ? exec_watch_lost(aa->ew) : 0;
        if (lost > aa->lost_seen) {
                log_warn("auto-attach: %llu exec notices lost (ring full); rescanning /proc",
                         (unsigned long long)(lost - aa->lost_seen));
                aa->lost_seen = lost;
                aa->rescan_wanted = true;
        }
        if (aa->rescan_wanted && aa_live(aa) < aa->rules->max_targets)
                aa_scan_begin(aa, false);
}

int autoattach_start(struct d9d *d, struct autoattach **out)
{
        struct autoattach *aa;
        int r;

        *out = NULL;
        if (!d->cfg.attach.n)
                return 0;
        aa = calloc(1, sizeof(*aa));
        if (!aa)
                return -ENOMEM;
        aa->d = d;
        aa->rules = &d->cfg.attach;
        snprintf(aa->removed.text, sizeof(aa->removed.text), "a rule removed by a reload");
        aa->timer_w = (struct d9_watch){ .fn = aa_on_timer };
        aa->timer_w.fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (aa->timer_w.fd < 0 || d9d_watch_add(d, &aa->timer_w, EPOLLIN) < 0) {
                r = -errno;
                if (aa->timer_w.fd >= 0)
                        close(aa->timer_w.fd);
                free(aa);
                return r;
        }
        /* Loaded now, not by the first match: exec -> attach stays one plan
         * and one attach long. A failure is said again by every attach. */
        r = session_bpf_load(d);
        if (r < 0)
                log_error("auto-attach: cannot load d9's BPF programs: %s", strerror(-r));
        /* First the watch, then the scan: nothing execs unseen in between. */
        r = exec_watch_start(d, aa_on_exec, aa, &aa->ew);
        if (r < 0)
                log_error("auto-attach: cannot watch execs (%s): rules apply to processes running now only",
                          strerror(-r));
        for (size_t i = 0; i < aa->rules->n; i++)
                log_info("auto-attach rule: %s", aa->rules->v[i].text);
        aa_scan_begin(aa, false);
        *out = aa;
        return 0;
}

static struct attach_rule *rule_by_text(struct attach_rules *rules, const char *text)
{
        for (size_t i = 0; i < rules->n; i++)
                if (!strcmp(rules->v[i].text, text))
                        return &rules->v[i];
        return NULL;
}

static struct attach_rule *aa_rule_after_reload(struct autoattach *aa, struct attach_rules *next,
                                                struct attach_rule *was)
{
        struct attach_rule *r = was == &aa->removed ? NULL : rule_by_text(next, was->text);

        return r ? r : &aa->removed;
}

int autoattach_reload(struct d9d *d, struct attach_rules *next)
{
        struct autoattach *aa = d->autoattach;
        struct attach_rules old = d->cfg.attach;
        size_t added = 0;

        for (size_t i = 0; i < next->n; i++) {
                struct attach_rule *r = &next->v[i], *was = rule_by_text(&old, r->text);
                if (was) {
                        r->matched = was->matched, r->attached = was->attached;
                        r->exited_first = was->exited_first, r->failed = was->failed, r->capped = was->capped;
                }
                r->added_by_reload = !was;
                added += !was;
        }
        for (size_t i = 0; i < old.n; i++)
                if (!rule_by_text(next, old.v[i].text))
                        log_info("auto-attach rule removed: %s (its sessions go on; new processes are not "
                                 "attached by it)", old.v[i].text);
        for (size_t i = 0; i < next->n; i++)
                if (next->v[i].added_by_reload)
                        log_info("auto-attach rule added: %s", next->v[i].text);
        /* Attaches planned, and failures still to be judged, under the old
         * rules count to the new ones. */
        for (struct aa_start *st = aa ? aa->starting : NULL; st; st = st->next)
                st->rule = aa_rule_after_reload(aa, next, st->rule);
        for (struct aa_failure *f = aa ? aa->failures : NULL; f; f = f->next)
                f->rule = aa_rule_after_reload(aa, next, f->rule);
        d->cfg.attach = *next;
        *next = (struct attach_rules){ .max_targets = d->cfg.attach.max_targets };
        d9d_attach_rules_free(&old);
        if (!aa)
                return autoattach_start(d, &d->autoattach);
        if (added) {
                /* A scan under way restarts: it may have passed processes
                 * the added rules match. A full one stays full. */
                bool full = aa->scan && !aa->scan_added_only;
                if (aa->scan)
                        closedir(aa->scan);
                aa->scan = NULL;
                aa_scan_begin(aa, !full);
        }
        return 0;
}

void autoattach_stop(struct autoattach *aa)
{
        if (!aa)
                return;
        exec_watch_stop(aa->ew);
        while (aa->starting)            /* none after planner_stop: kept safe anyway */
                aa_start_free(aa->starting);
        while (aa->retries) {
                struct aa_retry *r = aa->retries;
                aa->retries = r->next;
                free(r);
        }
        while (aa->failures) {
                struct aa_failure *f = aa->failures;
                aa->failures = f->next;
                aa_failure_free(f);
        }
        if (aa->scan)
                closedir(aa->scan);
        d9d_watch_del(aa->d, &aa->timer_w);
        close(aa->timer_w.fd);
        free(aa);
}

json_t *autoattach_status_json(const struct autoattach *aa)
{
        json_t *rules = json_array();

        for (size_t i = 0; i < aa->rules->n; i++) {
                const struct attach_rule *r = &aa->rules->v[i];
                json_array_append_new(rules, json_pack("{s:s,s:I,s:I,s:I,s:I,s:I}", "rule", r->text,
                        "matched", (json_int_t)r->matched, "attached", (json_int_t)r->attached,
                        "exited_first", (json_int_t)r->exited_first, "failed", (json_int_t)r->failed,
                        "capped", (json_int_t)r->capped));
        }
        json_t *j = json_pack("{s:o,s:i,s:i,s:b,s:I,s:I,s:I,s:I,s:I,s:I}", "rules", rules,
                "max_targets", (int)aa->rules->max_targets, "targets", (int)aa_live(aa),
                "watching_execs", aa->ew != NULL, "execs", (json_int_t)aa->execs,
                "execs_lost", (json_int_t)(aa->ew ? exec_watch_lost(aa->ew) : 0),
                "execs_outside_pidns", (json_int_t)(aa->ew ? exec_watch_invisible(aa->ew) : 0),
                "cap_refused", (json_int_t)aa->cap_refused, "gave_up_held", (json_int_t)aa->busy_gave_up,
                "scans", (json_int_t)aa->scans);
        json_object_set_new(j, "execs_gone", json_integer((json_int_t)aa->execs_gone));
        return j;
}
