/* no_leftovers: no BPF program or map named d9_* that appeared while the
 * test suite ran is still alive at its end. meson runs `--snapshot` first
 * and `--check` last (priorities), each alone: the snapshot records the
 * highest program and map ids (ids only grow), the check looks at every
 * newer object. Objects held only by processes that cannot be the
 * suite's (older than it, or with a living parent outside the test
 * runner: other users of a shared machine) are not ours to judge; a d9d
 * left running by any test of the run (a descendant of the runner, or an
 * orphan) is a leak and fails here. A live link holds its
 * program, so no program means no link either. On failure it lists what
 * is left.
 * usage: no_leftovers --snapshot FILE | --check FILE */
#include <dirent.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "harness.h"

/* Start time (clock ticks since boot) of a process, 0 if unknown. */
static unsigned long long start_ticks(const char *pid)
{
        char path[64], buf[1024], *p;
        unsigned long long t = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%s/stat", pid);
        f = fopen(path, "r");
        if (!f)
                return 0;
        if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
                /* after "pid (comm)": state is field 3, starttime field 22 */
                sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                       "%*d %*d %*d %*d %llu", &t);
        fclose(f);
        return t;
}

static pid_t parent_of(pid_t pid)
{
        char path[64], buf[1024], *p;
        int ppid = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        if (!f)
                return 0;
        if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
                sscanf(p + 2, "%*c %d", &ppid);
        fclose(f);
        return ppid;
}

/* Could this process be something the suite left behind: a descendant of
 * the test runner (our parent), or an orphan? Processes with a living
 * parent outside the runner belong to other users of the machine. */
static bool maybe_ours(pid_t pid, unsigned long long since)
{
        char name[32];
        pid_t runner = getppid(), p = parent_of(pid);

        snprintf(name, sizeof(name), "%d", (int)pid);
        if (start_ticks(name) < since)
                return false;
        if (p == 1)
                return true;
        for (int depth = 0; p > 1 && depth < 64; depth++, p = parent_of(p))
                if (p == runner)
                        return true;
        return false;
}

/* Is BPF object `id` (key "prog_id:" or "map_id:") held only by processes
 * that cannot be the suite's leftovers? An object nobody holds counts as
 * a leak (it would have to be pinned). */
static bool held_only_by_others(const char *key, __u32 id, unsigned long long since)
{
        DIR *proc = opendir("/proc");
        struct dirent *de;
        int holders = 0, ours = 0;

        while (proc && (de = readdir(proc))) {
                char path[600], line[128];
                bool holds = false;
                DIR *fds;

                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/fdinfo", de->d_name);
                fds = opendir(path);
                for (struct dirent *fd; fds && !holds && (fd = readdir(fds));) {
                        FILE *f;

                        snprintf(path, sizeof(path), "/proc/%s/fdinfo/%s", de->d_name, fd->d_name);
                        f = fopen(path, "r");
                        while (f && fgets(line, sizeof(line), f))
                                if (!strncmp(line, key, strlen(key)) &&
                                    (__u32)strtoul(line + strlen(key), NULL, 10) == id)
                                        holds = true;
                        if (f)
                                fclose(f);
                }
                if (fds)
                        closedir(fds);
                if (holds) {
                        holders++;
                        ours += maybe_ours(atoi(de->d_name), since);
                }
        }
        if (proc)
                closedir(proc);
        return holders > 0 && ours == 0;
}

typedef int (*next_id_fn)(__u32 start, __u32 *next);
typedef int (*fd_by_id_fn)(__u32 id);

static __u32 max_id(next_id_fn next)
{
        __u32 id = 0, n;

        while (next(id, &n) == 0)
                id = n;
        return id;
}

/* d9_* objects with an id above `after` that the suite may have left. */
static int count_new_d9(next_id_fn next, fd_by_id_fn get_fd, bool prog, __u32 after,
                        unsigned long long since, bool report)
{
        __u32 id = after, n;
        int count = 0;

        while (next(id, &n) == 0) {
                struct bpf_prog_info pi = { 0 };
                struct bpf_map_info mi = { 0 };
                __u32 len = prog ? sizeof(pi) : sizeof(mi);
                int fd = get_fd(n);

                id = n;
                if (fd < 0)
                        continue;       /* freed meanwhile */
                if (bpf_obj_get_info_by_fd(fd, prog ? (void *)&pi : (void *)&mi, &len) == 0 &&
                    !strncmp(prog ? pi.name : mi.name, "d9_", 3)) {
                        close(fd);
                        fd = -1;
                        if (!held_only_by_others(prog ? "prog_id:" : "map_id:", n, since)) {
                                if (report)
                                        tap_diag("left: %s id %u %s (no holder, or a "
                                                 "process the suite left behind)",
                                                 prog ? "prog" : "map", n,
                                                 prog ? pi.name : mi.name);
                                count++;
                        }
                }
                if (fd >= 0)
                        close(fd);
        }
        return count;
}

static int snapshot(const char *file)
{
        FILE *f = fopen(file, "w");

        if (!f || fprintf(f, "%u %u %llu\n", max_id(bpf_prog_get_next_id),
                          max_id(bpf_map_get_next_id), start_ticks("self")) < 0) {
                fprintf(stderr, "no_leftovers: cannot write %s\n", file);
                return 1;
        }
        fclose(f);
        tap_plan(1);
        tap_ok(true, "BPF ids before the suite recorded in %s", file);
        return 0;
}

int main(int argc, char **argv)
{
        unsigned prog_max = 0, map_max = 0;
        unsigned long long since = 0;
        int progs = 0, maps = 0, got = 0;
        FILE *f;

        if (argc != 3) {
                fprintf(stderr, "usage: no_leftovers --snapshot FILE | --check FILE\n");
                return 2;
        }
        if (!strcmp(argv[1], "--snapshot"))
                return snapshot(argv[2]);
        tap_plan(3);
        f = fopen(argv[2], "r");
        if (f) {
                got = fscanf(f, "%u %u %llu", &prog_max, &map_max, &since);
                fclose(f);
        }
        if (!tap_ok(got == 3, "ids from before the suite (%s): prog > %u, map > %u", argv[2],
                    prog_max, map_max))
                return tap_done();
        /* The kernel frees programs after an RCU grace period. */
        for (int i = 0; i < 30; i++) {
                bool last = i == 29;

                progs = count_new_d9(bpf_prog_get_next_id, bpf_prog_get_fd_by_id, true,
                                     prog_max, since, last);
                maps = count_new_d9(bpf_map_get_next_id, bpf_map_get_fd_by_id, false,
                                    map_max, since, last);
                if (!progs && !maps)
                        break;
                usleep(100 * 1000);
        }
        tap_ok(progs == 0, "no d9_* BPF program created during the suite is left (%d)", progs);
        tap_ok(maps == 0, "no d9_* BPF map created during the suite is left (%d)", maps);
        return tap_done();
}
