/* Auto-attach rules without BPF: what d9d.conf accepts and refuses, and
 * which processes each kind matches, from the facts proc_facts.c reads;
 * proc_facts_read itself against this test's own process. TAP output. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/core/attach_rules.h"
#include "daemon/core/config.h"
#include "daemon/record/proc_facts.h"
#include "proto/d9control.h"
#include "../tap.h"

static int add(struct d9d_config *cfg, const char *value)
{
        const char *why;

        return d9d_config_set(cfg, "attach", value, &why);
}

static const char *match(const struct attach_rules *rules, const char *exe, const char *cgroup)
{
        struct attach_rule *r = d9d_attach_rules_match(rules, exe, cgroup);

        return r ? r->text : "none";
}

static void test_parse(void)
{
        struct d9d_config cfg;
        static const char *bad[] = {
                "exe:", "exe:bin/app", "cgroup:relative", "cgroup:/a/../b", "cgroup:/a/", "cgroup://a",
                "unit:app", "unit:.service", "unit:a/b.service", "pid:12", "exe:app probes=bogus",
                "exe:app extra", "exe:app probes=",
        };
        const char *why;

        d9d_config_defaults(&cfg);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                ok(add(&cfg, bad[i]) == -EINVAL, "attach = %s is refused", bad[i]);
        ok(cfg.attach.n == 0, "refused rules are not kept");
        int r = add(&cfg, "exe:api probes=poll,sched");
        ok(r == 0 && cfg.attach.v[0].probes == (D9_PROBE_POLL | D9_PROBE_SCHED) &&
           !strcmp(cfg.attach.v[0].text, "exe:api probes=sched,poll"),
           "per-rule probe set parsed and shown: %s", cfg.attach.n ? cfg.attach.v[0].text : "");
        ok(add(&cfg, "unit:pay.service") == 0 && cfg.attach.v[1].probes == D9_PROBE_DEFAULT &&
           !strcmp(cfg.attach.v[1].text, "unit:pay.service"), "no probes= means the default set, as attach's");
        ok(cfg.attach.max_targets == ATTACH_DEFAULT_MAX_TARGETS, "auto_attach_max defaults to %u",
           ATTACH_DEFAULT_MAX_TARGETS);
        ok(d9d_config_set(&cfg, "auto_attach_max", "0", &why) == -EINVAL &&
           d9d_config_set(&cfg, "auto_attach_max", "3", &why) == 0 && cfg.attach.max_targets == 3,
           "auto_attach_max: 0 refused, 3 taken");
        d9d_config_free(&cfg);
}

static void test_match(void)
{
        struct d9d_config cfg;

        d9d_config_defaults(&cfg);
        add(&cfg, "exe:/srv/app/api");
        add(&cfg, "exe:worker");
        add(&cfg, "cgroup:/kubepods.slice/pod1");
        add(&cfg, "unit:pay.service");
        const struct attach_rules *r = &cfg.attach;
        ok(!strcmp(match(r, "/usr/bin/worker", "/"), "exe:worker"), "exe:NAME matches the basename");
        ok(!strcmp(match(r, "/usr/bin/worker2", "/"), "none") && !strcmp(match(r, "/usr/bin/xworker", "/"), "none"),
           "exe:NAME matches no longer or shorter names");
        ok(!strcmp(match(r, "/srv/app/api", "/"), "exe:/srv/app/api") && !strcmp(match(r, "/opt/srv/app/api", "/"), "none"),
           "exe:/PATH matches the whole path only");
        ok(!strcmp(match(r, "/bin/x", "/kubepods.slice/pod1"), "cgroup:/kubepods.slice/pod1") &&
           !strcmp(match(r, "/bin/x", "/kubepods.slice/pod1/ctr"), "cgroup:/kubepods.slice/pod1"),
           "cgroup:PATH matches the cgroup and those below it");
        ok(!strcmp(match(r, "/bin/x", "/kubepods.slice/pod10"), "none"), "cgroup:PATH is no string prefix match");
        ok(!strcmp(match(r, "/bin/x", "/system.slice/pay.service"), "unit:pay.service") &&
           !strcmp(match(r, "/bin/x", "/system.slice/pay.service/payload"), "unit:pay.service") &&
           !strcmp(match(r, "/bin/x", "/pay.service"), "unit:pay.service"),
           "unit: matches a system unit's cgroup and below");
        ok(!strcmp(match(r, "/bin/x", "/user.slice/user-1000.slice/user@1000.service/app.slice/pay.service"), "none"),
           "unit: never matches a cgroup a user's own systemd named so (below user@.service)");
        ok(!strcmp(match(r, "", ""), "none"), "a kernel thread (no exe, no cgroup) matches nothing");
        d9d_config_free(&cfg);
}

static void test_own_facts(void)
{
        int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
        struct proc_facts f;
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

        self[n > 0 ? n : 0] = 0;
        ok(proc_facts_read(getpid(), pidfd, &f) == 0 && !strcmp(f.exe, self) && f.cgroup[0] == '/' &&
           f.ns_pid == getpid() && f.uid == getuid(),
           "proc_facts_read of this process: exe %s, cgroup %s, nspid '%s'", f.exe, f.cgroup, f.nspid);
        close(pidfd);
        pid_t child = fork();
        if (child == 0)
                _exit(0);
        pidfd = (int)syscall(SYS_pidfd_open, child, 0);
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                ;
        ok(proc_facts_read(child, pidfd, &f) == -ESRCH, "an exited (reaped) process: -ESRCH, no facts");
        close(pidfd);
}

int main(void)
{
        test_parse();
        test_match();
        test_own_facts();
        return tap_done();
}
