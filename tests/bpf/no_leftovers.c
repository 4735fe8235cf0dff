/* no_leftovers: no BPF program or map named d9_* that appeared while the
 * test suite ran is still alive at its end. meson runs `--snapshot` first
 * and `--check` last (priorities), each alone: the snapshot records the
 * highest program and map ids (ids only grow), the check looks at every
 * newer object. Objects of processes that were already running (a d9d
 * someone left behind) are not ours to judge; a d9d left running by a
 * test of this suite is a leak and fails here. (On a shared machine, a
 * process started by someone else during the suite is counted too.) A live link holds its
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

/* Does a process started before `since` hold BPF object `id` (key is
 * "prog_id:" or "map_id:")? Such objects belong to something that was
 * running before the suite (another user of this machine), not to it. */
static bool held_by_older_process(const char *key, __u32 id, unsigned long long since)
{
        DIR *proc = opendir("/proc");
        struct dirent *de;
        bool older = false;

        while (proc && !older && (de = readdir(proc))) {
                char path[600], line[128];
                DIR *fds;

                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/fdinfo", de->d_name);
                fds = opendir(path);
                for (struct dirent *fd; fds && !older && (fd = readdir(fds));) {
                        FILE *f;

                        snprintf(path, sizeof(path), "/proc/%s/fdinfo/%s", de->d_name, fd->d_name);
                        f = fopen(path, "r");
                        while (f && fgets(line, sizeof(line), f))
                                if (!strncmp(line, key, strlen(key)) &&
                                    (__u32)strtoul(line + strlen(key), NULL, 10) == id) {
                                        unsigned long long t = start_ticks(de->d_name);

                                        older |= t && t < since;
                                        break;
                                }
                        if (f)
                                fclose(f);
                }
                if (fds)
                        closedir(fds);
        }
        if (proc)
                closedir(proc);
        return older;
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

/* d9_* objects with an id above `after`, except those held by a process
 * older than the suite. */
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
                        if (!held_by_older_process(prog ? "prog_id:" : "map_id:", n, since)) {
                                if (report)
                                        tap_diag("left: %s id %u %s (no holder, or one "
                                                 "started during the suite)",
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
