/* preflight: at start, find out what this kernel and this process's
 * capabilities allow, so d9d can say exactly what is missing and what it will
 * do without it instead of failing later with a bare EPERM. Kernel features
 * are tested by doing the real thing once (load a two-instruction program,
 * attach a uprobe to a function of our own executable), not by guessing from
 * the kernel version. */
#include "daemon/core/preflight.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "bpf/bpf_resume.h"

/* Older uapi headers lack the two capabilities split out of CAP_SYS_ADMIN. */
#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif
/* The kernel's internal ENOTSUPP leaks out of bpf() on some paths. */
#define ENOTSUPP_KERNEL 524

static const char *const check_names[PREFLIGHT_NR] = {
        [PREFLIGHT_BTF] = "btf",
        [PREFLIGHT_RINGBUF] = "ringbuf",
        [PREFLIGHT_UPROBE_MULTI] = "uprobe_multi",
        [PREFLIGHT_UPROBE] = "uprobe",
        [PREFLIGHT_TASK_WORK] = "task_work",
        [PREFLIGHT_CAP_BPF] = "cap_bpf",
        [PREFLIGHT_CAP_PERFMON] = "cap_perfmon",
        [PREFLIGHT_CAP_SYS_ADMIN] = "cap_sys_admin",
        [PREFLIGHT_CAP_SYS_PTRACE] = "cap_sys_ptrace",
        [PREFLIGHT_CAP_DAC_READ_SEARCH] = "cap_dac_read_search",
        [PREFLIGHT_CAP_SYS_RESOURCE] = "cap_sys_resource",
        [PREFLIGHT_CAP_SYSLOG] = "cap_syslog",
        [PREFLIGHT_PERF_EVENT_PARANOID] = "perf_event_paranoid",
};

/* What the checks share: our effective capabilities and the probe target. */
struct preflight_ctx {
        uint64_t cap_eff;
        int cap_err;            /* capget() errno, 0 when cap_eff is valid */
        char exe_path[4096];    /* file that holds d9d_preflight_uprobe_target() */
        unsigned long exe_off;  /* its file offset: what uprobes attach to */
        int exe_err;
};

static void finding_set(struct preflight_finding *f, enum preflight_level level,
                        const char *consequence, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static void finding_set(struct preflight_finding *f, enum preflight_level level,
                        const char *consequence, const char *fmt, ...)
{
        va_list ap;

        f->level = level;
        va_start(ap, fmt);
        vsnprintf(f->detail, sizeof(f->detail), fmt, ap);
        va_end(ap);
        snprintf(f->consequence, sizeof(f->consequence), "%s",
                 level == PREFLIGHT_OK || !consequence ? "" : consequence);
}

static bool has_cap(const struct preflight_ctx *ctx, int cap)
{
        return ctx->cap_err == 0 && (ctx->cap_eff >> cap) & 1;
}

/* capget(2) directly: libcap would be a new dependency for one syscall. */
static void caps_read(struct preflight_ctx *ctx)
{
        struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};

        if (syscall(SYS_capget, &hdr, data) < 0) {
                ctx->cap_err = errno;
                return;
        }
        ctx->cap_eff = (uint64_t)data[1].effective << 32 | data[0].effective;
}

/* Never inlined or folded away: the uprobe checks attach to its entry. */
__attribute__((noinline, used)) int d9d_preflight_uprobe_target(int x);
__attribute__((noinline, used)) int d9d_preflight_uprobe_target(int x)
{
        __asm__ volatile("" : "+r"(x));
        return x + 1;
}

/* File and file offset of d9d_preflight_uprobe_target(), from /proc/self/maps:
 * uprobes are placed by (inode, offset), exactly as for a Tokio target. When
 * the function is in our executable the probe names it /proc/self/exe, which
 * resolves even when a sandbox hides the path maps shows (PrivateTmp). */
static void uprobe_target_locate(struct preflight_ctx *ctx)
{
        uintptr_t addr = (uintptr_t)&d9d_preflight_uprobe_target;
        FILE *maps = fopen("/proc/self/maps", "re");
        char line[4096 + 128];
        struct stat exe;
        bool have_exe = stat("/proc/self/exe", &exe) == 0;

        ctx->exe_err = ENOENT;
        if (!maps) {
                ctx->exe_err = errno;
                return;
        }
        while (fgets(line, sizeof(line), maps)) {
                unsigned long start, end, off, ino;
                unsigned dev_major, dev_minor;
                int path_at = 0;

                if (sscanf(line, "%lx-%lx %*s %lx %x:%x %lu %n", &start, &end, &off, &dev_major,
                           &dev_minor, &ino, &path_at) < 6 || path_at == 0 || addr < start || addr >= end)
                        continue;
                line[strcspn(line, "\n")] = '\0';
                bool in_exe = have_exe && exe.st_ino == ino && exe.st_dev == makedev(dev_major, dev_minor);

                snprintf(ctx->exe_path, sizeof(ctx->exe_path), "%s", in_exe ? "/proc/self/exe" : line + path_at);
                ctx->exe_off = addr - start + off;
                ctx->exe_err = ctx->exe_path[0] == '/' ? 0 : ENOENT;
                break;
        }
        fclose(maps);
}

static void check_btf(struct preflight_finding *f, const struct preflight_ctx *ctx,
                      const struct preflight_report *done)
{
        static const char path[] = "/sys/kernel/btf/vmlinux";
        struct stat st;

        if (stat(path, &st) == 0 && st.st_size > 0) {
                finding_set(f, PREFLIGHT_OK, NULL, "%s (%lld KiB)", path, (long long)st.st_size / 1024);
                return;
        }
        /* libbpf also looks in /boot and /usr/lib/debug for a vmlinux. */
        struct btf *btf = btf__load_vmlinux_btf();
        long err = libbpf_get_error(btf);

        if (!err) {
                btf__free(btf);
                finding_set(f, PREFLIGHT_OK, NULL, "%s missing; libbpf found a vmlinux with BTF elsewhere", path);
                return;
        }
        finding_set(f, PREFLIGHT_FATAL,
                    "CO-RE programs cannot be relocated, nothing can be traced; use a kernel built with CONFIG_DEBUG_INFO_BTF=y",
                    "%s missing and no vmlinux with BTF found", path);
}

/* Our own probe rather than libbpf_probe_bpf_map_type(), which reports
 * "unsupported" for EPERM too: we must tell "old kernel" from "no CAP_BPF". */
static void check_ringbuf(struct preflight_finding *f, const struct preflight_ctx *ctx,
                          const struct preflight_report *done)
{
        int fd = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "d9_preflight", 0, 0,
                                (uint32_t)sysconf(_SC_PAGESIZE), NULL);
        int err = fd < 0 ? errno : 0;

        if (fd >= 0) {
                close(fd);
                finding_set(f, PREFLIGHT_OK, NULL, "BPF ring buffer maps work");
        } else if (err == EINVAL) {
                finding_set(f, PREFLIGHT_FATAL, "d9d drains only ring buffers, so nothing can be traced (needs Linux >= 5.8)",
                            "kernel has no BPF ring buffer");
        } else {
                finding_set(f, PREFLIGHT_FATAL, "no BPF map can be created, so nothing can be traced (needs CAP_BPF)",
                            "cannot create a BPF ring buffer: %s", strerror(err));
        }
}

/* Two instructions, "return 0": enough to find out whether the kernel lets
 * us load and attach a uprobe program, and nothing it runs can go wrong. */
static int trivial_prog_load(enum bpf_attach_type expected)
{
        const struct bpf_insn insns[] = {
                { .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
                { .code = BPF_JMP | BPF_EXIT },
        };
        LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = expected);
        int fd = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "d9_preflight", "GPL", insns, 2, &opts);

        return fd < 0 ? -errno : fd;
}

static int uprobe_pmu_type(void)
{
        FILE *f = fopen("/sys/bus/event_source/devices/uprobe/type", "re");
        int type = -ENOENT;

        if (f) {
                if (fscanf(f, "%d", &type) != 1)
                        type = -EINVAL;
                fclose(f);
        }
        return type;
}

/* The per-probe route d9d falls back to: a uprobe perf event with a BPF
 * program on it, limited to our pid, on our own function. */
static int uprobe_attach_once(const struct preflight_ctx *ctx)
{
        int type = uprobe_pmu_type();

        if (type < 0)
                return type;

        int prog = trivial_prog_load(0);

        if (prog < 0)
                return prog;

        struct perf_event_attr attr = {
                .size = sizeof(attr),
                .type = (uint32_t)type,
                .config1 = (uint64_t)(uintptr_t)ctx->exe_path,
                .config2 = ctx->exe_off,
        };
        int r = 0;
        int pfd = syscall(SYS_perf_event_open, &attr, getpid(), -1, -1, PERF_FLAG_FD_CLOEXEC);

        if (pfd < 0 || ioctl(pfd, PERF_EVENT_IOC_SET_BPF, prog) < 0 ||
            ioctl(pfd, PERF_EVENT_IOC_ENABLE, 0) < 0)
                r = -errno;
        else
                d9d_preflight_uprobe_target(r); /* one real hit through the probe */
        if (pfd >= 0)
                close(pfd);
        close(prog);
        return r;
}

/* Measured on Linux 6.18: a uprobe perf event needs CAP_SYS_ADMIN (EACCES
 * with only CAP_BPF + CAP_PERFMON), an uprobe_multi link does not. So this
 * route matters only where uprobe_multi is missing. */
static void check_uprobe(struct preflight_finding *f, const struct preflight_ctx *ctx,
                         const struct preflight_report *done)
{
        bool multi = done->finding[PREFLIGHT_UPROBE_MULTI].level == PREFLIGHT_OK;

        if (ctx->exe_err) {
                finding_set(f, multi ? PREFLIGHT_OK : PREFLIGHT_FATAL, "cannot tell whether uprobes can be attached",
                            "cannot locate own executable in /proc/self/maps: %s", strerror(ctx->exe_err));
                return;
        }
        int r = uprobe_attach_once(ctx);

        if (r == 0)
                finding_set(f, PREFLIGHT_OK, NULL, "test uprobe perf event attached to %s+0x%lx",
                            ctx->exe_path, ctx->exe_off);
        else if (multi)
                finding_set(f, PREFLIGHT_OK, NULL, "uprobe perf events refused (%s); not needed: uprobe_multi works",
                            strerror(-r));
        else if (r == -EPERM || r == -EACCES)
                finding_set(f, PREFLIGHT_FATAL,
                            "no Tokio probe can be attached: grant CAP_SYS_ADMIN (per-probe uprobes need it) or use Linux >= 6.6",
                            "uprobe perf event refused: %s", strerror(-r));
        else
                finding_set(f, PREFLIGHT_FATAL, "no Tokio probe can be attached (kernel needs CONFIG_UPROBE_EVENTS)",
                            "uprobe perf event failed: %s", strerror(-r));
}

static int uprobe_multi_attach_once(const struct preflight_ctx *ctx)
{
        int prog = trivial_prog_load(BPF_TRACE_UPROBE_MULTI);

        if (prog < 0)
                return prog;

        const unsigned long offsets[1] = { ctx->exe_off };
        LIBBPF_OPTS(bpf_link_create_opts, opts,
                    .uprobe_multi.path = ctx->exe_path,
                    .uprobe_multi.offsets = offsets,
                    .uprobe_multi.cnt = 1,
                    .uprobe_multi.pid = (uint32_t)getpid());
        int link = bpf_link_create(prog, 0, BPF_TRACE_UPROBE_MULTI, &opts);
        int r = link < 0 ? -errno : 0;

        if (link >= 0) {
                d9d_preflight_uprobe_target(r);
                close(link);
        }
        close(prog);
        return r;
}

static void check_uprobe_multi(struct preflight_finding *f, const struct preflight_ctx *ctx,
                               const struct preflight_report *done)
{
        static const char fallback[] =
                "attaching one uprobe per probe point: slower attach and one fd per probe";
        struct utsname u = {};

        uname(&u);
        if (ctx->exe_err) {
                finding_set(f, PREFLIGHT_DEGRADED, fallback, "not tested: own executable not found");
                return;
        }
        int r = uprobe_multi_attach_once(ctx);

        if (r == 0)
                finding_set(f, PREFLIGHT_OK, NULL, "uprobe_multi link attached (kernel %s)", u.release);
        else if (r == -EINVAL || r == -EOPNOTSUPP || r == -ENOTSUPP_KERNEL)
                finding_set(f, PREFLIGHT_DEGRADED, fallback, "not supported by kernel %s (needs >= 6.6)", u.release);
        else
                finding_set(f, PREFLIGHT_DEGRADED, fallback, "uprobe_multi link failed: %s", strerror(-r));
}

static int read_sysctl_int(const char *path, int *value)
{
        FILE *f = fopen(path, "re");
        int r = 0;

        if (!f)
                return -errno;
        if (fscanf(f, "%d", value) != 1)
                r = -EINVAL;
        fclose(f);
        return r;
}

/* CAP_BPF and CAP_PERFMON were split out of CAP_SYS_ADMIN in Linux 5.8;
 * CAP_SYS_ADMIN still implies both. */
static void check_cap_split(struct preflight_finding *f, const struct preflight_ctx *ctx,
                            int cap, const char *name, const char *without)
{
        if (ctx->cap_err)
                finding_set(f, PREFLIGHT_FATAL, without, "capget failed: %s", strerror(ctx->cap_err));
        else if (has_cap(ctx, cap))
                finding_set(f, PREFLIGHT_OK, NULL, "%s held", name);
        else if (has_cap(ctx, CAP_SYS_ADMIN))
                finding_set(f, PREFLIGHT_OK, NULL, "%s not held; CAP_SYS_ADMIN covers it", name);
        else
                finding_set(f, PREFLIGHT_FATAL, without, "%s not in the effective set", name);
}

static void check_cap_bpf(struct preflight_finding *f, const struct preflight_ctx *ctx,
                          const struct preflight_report *done)
{
        check_cap_split(f, ctx, CAP_BPF, "CAP_BPF",
                        "BPF maps and programs cannot be created: nothing can be traced");
}

static void check_cap_perfmon(struct preflight_finding *f, const struct preflight_ctx *ctx,
                              const struct preflight_report *done)
{
        check_cap_split(f, ctx, CAP_PERFMON, "CAP_PERFMON",
                        "tracing programs cannot be loaded; uprobes, sched_switch and CPU sampling cannot be attached");
}

static void check_cap_sys_admin(struct preflight_finding *f, const struct preflight_ctx *ctx,
                                const struct preflight_report *done)
{
        bool multi = done->finding[PREFLIGHT_UPROBE_MULTI].level == PREFLIGHT_OK;

        if (has_cap(ctx, CAP_SYS_ADMIN))
                finding_set(f, PREFLIGHT_OK, NULL, "CAP_SYS_ADMIN held%s",
                            multi ? " (more than needed: uprobe_multi works with CAP_BPF and CAP_PERFMON)" : "");
        else if (multi && has_cap(ctx, CAP_BPF) && has_cap(ctx, CAP_PERFMON))
                finding_set(f, PREFLIGHT_OK, NULL,
                            "CAP_SYS_ADMIN not held; not needed: uprobe_multi works with CAP_BPF and CAP_PERFMON");
        else if (!has_cap(ctx, CAP_BPF) || !has_cap(ctx, CAP_PERFMON))
                finding_set(f, PREFLIGHT_DEGRADED, "grant CAP_BPF and CAP_PERFMON (preferred) or CAP_SYS_ADMIN",
                            "CAP_SYS_ADMIN not held and CAP_BPF/CAP_PERFMON incomplete");
        else
                finding_set(f, PREFLIGHT_DEGRADED,
                            "without uprobe_multi, uprobes are perf events and need CAP_SYS_ADMIN: grant it",
                            "CAP_SYS_ADMIN not held");
}

static void check_cap_sys_ptrace(struct preflight_finding *f, const struct preflight_ctx *ctx,
                                 const struct preflight_report *done)
{
        char without[192];

        snprintf(without, sizeof(without),
                 "only processes of uid %u can be traced: other users' /proc/PID/exe, maps and root are refused",
                 (unsigned)geteuid());
        if (has_cap(ctx, CAP_SYS_PTRACE))
                finding_set(f, PREFLIGHT_OK, NULL, "CAP_SYS_PTRACE held");
        else
                finding_set(f, PREFLIGHT_DEGRADED, without, "CAP_SYS_PTRACE not in the effective set");
}

static void check_cap_dac_read_search(struct preflight_finding *f, const struct preflight_ctx *ctx,
                                      const struct preflight_report *done)
{
        if (has_cap(ctx, CAP_DAC_READ_SEARCH))
                finding_set(f, PREFLIGHT_OK, NULL, "CAP_DAC_READ_SEARCH held");
        else if (has_cap(ctx, CAP_DAC_OVERRIDE))
                finding_set(f, PREFLIGHT_OK, NULL, "CAP_DAC_READ_SEARCH not held; CAP_DAC_OVERRIDE covers it");
        else
                finding_set(f, PREFLIGHT_DEGRADED,
                            "executables this uid cannot read (e.g. under a 0700 home) cannot be opened; attaching to them fails",
                            "CAP_DAC_READ_SEARCH not in the effective set");
}

static void check_cap_sys_resource(struct preflight_finding *f, const struct preflight_ctx *ctx,
                                   const struct preflight_report *done)
{
        struct rlimit nofile;
        char limit[32] = "unknown", without[192];

        /* A seccomp filter may refuse prlimit64(): then the limit is unknown. */
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0)
                snprintf(limit, sizeof(limit), "%llu", (unsigned long long)nofile.rlim_max);
        snprintf(without, sizeof(without),
                 "RLIMIT_NOFILE cannot be raised above its hard limit (%s): per-probe attach stops at about that many probes",
                 limit);
        if (has_cap(ctx, CAP_SYS_RESOURCE))
                finding_set(f, PREFLIGHT_OK, NULL, "CAP_SYS_RESOURCE held");
        else if (done->finding[PREFLIGHT_UPROBE_MULTI].level == PREFLIGHT_OK)
                /* BPF memory is charged to the cgroup since 5.11, so
                 * RLIMIT_MEMLOCK no longer matters either. */
                finding_set(f, PREFLIGHT_OK, NULL,
                            "CAP_SYS_RESOURCE not held; not needed: uprobe_multi needs few fds (RLIMIT_NOFILE %s)",
                            limit);
        else
                finding_set(f, PREFLIGHT_DEGRADED, without, "CAP_SYS_RESOURCE not in the effective set");
}

/* First address in /proc/kallsyms: 0 when it is hidden from us. */
static int kallsyms_first_addr(unsigned long long *addr)
{
        FILE *f = fopen("/proc/kallsyms", "re");
        int r = 0;

        if (!f)
                return -errno;
        if (fscanf(f, "%llx", addr) != 1)
                r = -EINVAL;
        fclose(f);
        return r;
}

/* /proc/kallsyms shows real addresses only to CAP_SYSLOG, unless
 * kptr_restrict=0 and perf_event_paranoid<=1 (kallsyms_show_value()); a
 * sandbox may hide the file altogether (ProtectKernelTunables=yes). */
static void check_cap_syslog(struct preflight_finding *f, const struct preflight_ctx *ctx,
                             const struct preflight_report *done)
{
        static const char without[] = "kernel frames in stacks stay unsymbolized (shown as addresses)";
        const char *held = has_cap(ctx, CAP_SYSLOG) ? "CAP_SYSLOG held" : "CAP_SYSLOG not held";
        int kptr = -1, paranoid = -1;
        unsigned long long addr = 0;
        int r = kallsyms_first_addr(&addr);

        read_sysctl_int("/proc/sys/kernel/kptr_restrict", &kptr);
        read_sysctl_int("/proc/sys/kernel/perf_event_paranoid", &paranoid);
        if (r < 0)
                finding_set(f, PREFLIGHT_DEGRADED, without, "cannot read /proc/kallsyms: %s", strerror(-r));
        else if (addr == 0)
                finding_set(f, PREFLIGHT_DEGRADED, without,
                            "/proc/kallsyms shows zero addresses (%s, kptr_restrict=%d, perf_event_paranoid=%d)",
                            held, kptr, paranoid);
        else
                finding_set(f, PREFLIGHT_OK, NULL, "/proc/kallsyms shows addresses (%s, kptr_restrict=%d)",
                            held, kptr);
}

static void check_perf_event_paranoid(struct preflight_finding *f, const struct preflight_ctx *ctx,
                                      const struct preflight_report *done)
{
        int paranoid = 0;
        int r = read_sysctl_int("/proc/sys/kernel/perf_event_paranoid", &paranoid);
        bool perfmon = has_cap(ctx, CAP_PERFMON) || has_cap(ctx, CAP_SYS_ADMIN);

        if (r < 0)
                finding_set(f, perfmon ? PREFLIGHT_OK : PREFLIGHT_DEGRADED,
                            "assuming it forbids system-wide CPU sampling: CPU samples are not recorded",
                            "cannot read /proc/sys/kernel/perf_event_paranoid: %s", strerror(-r));
        else if (perfmon)
                finding_set(f, PREFLIGHT_OK, NULL, "%d; does not restrict d9d, which holds CAP_PERFMON", paranoid);
        else if (paranoid <= -1)
                finding_set(f, PREFLIGHT_OK, NULL, "%d; allows system-wide sampling without CAP_PERFMON", paranoid);
        else
                finding_set(f, PREFLIGHT_DEGRADED,
                            "per-CPU 99 Hz sampling needs CAP_PERFMON or perf_event_paranoid=-1: CPU samples are not recorded",
                            "%d and no CAP_PERFMON", paranoid);
}

/* Long off-CPU intervals take their user stack in the thread as it
 * resumes; the loader builds d9_sched for the way this kernel allows. */
static void check_task_work(struct preflight_finding *f, const struct preflight_ctx *ctx,
                            const struct preflight_report *done)
{
        if (d9_bpf_resume_way() == D9_RESUME_NONE)
                finding_set(f, PREFLIGHT_DEGRADED,
                            "off-CPU intervals are recorded without user stacks: a worker's sleep is not told "
                            "from a poll that blocks",
                            "off-CPU user stacks: %s", d9_bpf_resume_why());
        else
                finding_set(f, PREFLIGHT_OK, NULL, "off-CPU user stacks: %s",
                            d9_bpf_resume_why());
}

typedef void (*check_fn)(struct preflight_finding *f, const struct preflight_ctx *ctx,
                         const struct preflight_report *done);

/* Run in this order: later checks read earlier findings. */
static const check_fn checks[PREFLIGHT_NR] = {
        [PREFLIGHT_BTF] = check_btf,
        [PREFLIGHT_RINGBUF] = check_ringbuf,
        [PREFLIGHT_UPROBE_MULTI] = check_uprobe_multi,
        [PREFLIGHT_UPROBE] = check_uprobe,
        [PREFLIGHT_TASK_WORK] = check_task_work,
        [PREFLIGHT_CAP_BPF] = check_cap_bpf,
        [PREFLIGHT_CAP_PERFMON] = check_cap_perfmon,
        [PREFLIGHT_CAP_SYS_ADMIN] = check_cap_sys_admin,
        [PREFLIGHT_CAP_SYS_PTRACE] = check_cap_sys_ptrace,
        [PREFLIGHT_CAP_DAC_READ_SEARCH] = check_cap_dac_read_search,
        [PREFLIGHT_CAP_SYS_RESOURCE] = check_cap_sys_resource,
        [PREFLIGHT_CAP_SYSLOG] = check_cap_syslog,
        [PREFLIGHT_PERF_EVENT_PARANOID] = check_perf_event_paranoid,
};

void d9d_preflight_run(struct preflight_report *report)
{
        struct preflight_ctx ctx = {};

        memset(report, 0, sizeof(*report));
        caps_read(&ctx);
        uprobe_target_locate(&ctx);
        for (int i = 0; i < PREFLIGHT_NR; i++) {
                struct preflight_finding *f = &report->finding[i];

                checks[i](f, &ctx, report);
                report->degraded += f->level == PREFLIGHT_DEGRADED;
                report->fatal += f->level == PREFLIGHT_FATAL;
        }
}

bool d9d_preflight_ok(const struct preflight_report *report, enum preflight_check check)
{
        return check >= 0 && check < PREFLIGHT_NR && report->finding[check].level == PREFLIGHT_OK;
}

const char *d9d_preflight_name(enum preflight_check check)
{
        return check >= 0 && check < PREFLIGHT_NR ? check_names[check] : "unknown";
}

int d9d_preflight_log(const struct preflight_report *report, FILE *out, bool verbose)
{
        static const char *const level_names[] = { "ok", "degraded", "FATAL" };
        int lines = 0;

        for (int i = 0; i < PREFLIGHT_NR; i++) {
                const struct preflight_finding *f = &report->finding[i];

                if (f->level == PREFLIGHT_OK && !verbose)
                        continue;
                fprintf(out, "d9d: preflight: %s: %s: %s%s%s\n", check_names[i], level_names[f->level],
                        f->detail, f->consequence[0] ? ": " : "", f->consequence);
                lines++;
        }
        return lines;
}
