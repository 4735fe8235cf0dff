/* target_open: turn a PID into a path we can open and attach to, whatever
 * mount namespace the target lives in.
 *
 * /proc/PID/exe opens the very file the process runs (even from another mount
 * namespace, even if deleted or replaced on disk), so it is the primary route.
 * The path reported in the plan prefers /proc/PID/root/<exe> when that names
 * the same inode, because it keeps the executable's real name for humans and
 * for finding debug files next to it. /proc/PID/map_files is the fallback for
 * when the exe link cannot be followed (e.g. some LSM setups). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "uprobes-int.h"

static bool same_inode(const char *a, const char *b)
{
        struct stat sa, sb;

        return stat(a, &sa) == 0 && stat(b, &sb) == 0 &&
               sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* First mapping of the executable in /proc/PID/maps, as a map_files path. */
static char *map_files_path(pid_t pid, const char *exe)
{
        char maps[64], line[4096], *found = NULL;
        FILE *f;

        snprintf(maps, sizeof(maps), "/proc/%d/maps", pid);
        f = fopen(maps, "re");
        if (!f)
                return NULL;
        while (!found && fgets(line, sizeof(line), f)) {
                uint64_t lo, hi;
                char *path = strchr(line, '/');

                if (!path || sscanf(line, "%" SCNx64 "-%" SCNx64, &lo, &hi) != 2)
                        continue;
                path[strcspn(path, "\n")] = 0;
                if (strcmp(path, exe) == 0)
                        asprintf(&found, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, lo, hi);
        }
        fclose(f);
        return found;
}

static int explain_errno(pid_t pid, int r, char **err_msg)
{
        if (!err_msg)
                return r;
        if (r == -ENOENT || r == -ESRCH)
                asprintf(err_msg, "no process with PID %d", pid);
        else if (r == -EACCES || r == -EPERM)
                asprintf(err_msg, "permission denied reading /proc/%d/exe "
                         "(run as root or with CAP_SYS_PTRACE)", pid);
        else
                asprintf(err_msg, "cannot read /proc/%d/exe: %s", pid, strerror(-r));
        return r;
}

int target_exe_path(pid_t pid, char **path, char **err_msg)
{
        char link[64], proc_dir[64], exe[4096];
        ssize_t n;

        if (pid <= 0) {
                if (err_msg)
                        asprintf(err_msg, "invalid PID %d", pid);
                return -EINVAL;
        }
        snprintf(proc_dir, sizeof(proc_dir), "/proc/%d", pid);
        if (access(proc_dir, F_OK) < 0)
                return explain_errno(pid, -errno, err_msg);
        snprintf(link, sizeof(link), "/proc/%d/exe", pid);
        n = readlink(link, exe, sizeof(exe) - 1);
        if (n < 0) {
                int r = -errno;

                if (r == -ENOENT && access(proc_dir, F_OK) == 0) {
                        if (err_msg)
                                asprintf(err_msg, "PID %d has no executable (kernel thread or zombie)", pid);
                        return -ENOEXEC;
                }
                return explain_errno(pid, r, err_msg);
        }
        exe[n] = 0;

        char *rooted = NULL;
        asprintf(&rooted, "/proc/%d/root%s", pid, exe);
        if (rooted && same_inode(rooted, link)) {
                *path = rooted;
                return 0;
        }
        free(rooted);
        if (access(link, R_OK) == 0) {
                *path = strdup(link);
                return *path ? 0 : -ENOMEM;
        }
        *path = map_files_path(pid, exe);
        if (*path && access(*path, R_OK) == 0)
                return 0;
        free(*path);
        *path = NULL;
        return explain_errno(pid, -EACCES, err_msg);
}
