/* no_leftovers: after the bpf tests (meson runs it last, alone), no BPF
 * program or map named d9_* exists anywhere on the system. A live link
 * holds its program, so no program means no link either; the per-test
 * checks already compare object ids, this one also catches what a
 * crashed or killed process could not clean up. On failure it names the
 * processes holding BPF objects (a d9d left running counts: it is a leak
 * of whoever started it).
 * usage: no_leftovers */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static void name_holders(void)
{
        DIR *proc = opendir("/proc");
        struct dirent *de;

        while (proc && (de = readdir(proc))) {
                char path[600], cmd[256] = "";
                int n = 0;
                DIR *fds;
                FILE *f;

                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/fdinfo", de->d_name);
                fds = opendir(path);
                for (struct dirent *fd; fds && (fd = readdir(fds));) {
                        char line[128];

                        snprintf(path, sizeof(path), "/proc/%s/fdinfo/%s", de->d_name, fd->d_name);
                        f = fopen(path, "r");
                        while (f && fgets(line, sizeof(line), f))
                                n += !strncmp(line, "prog_id:", 8);
                        if (f)
                                fclose(f);
                }
                if (fds)
                        closedir(fds);
                if (!n)
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
                f = fopen(path, "r");
                if (f) {
                        size_t len = fread(cmd, 1, sizeof(cmd) - 1, f);

                        for (size_t i = 0; i < len; i++)
                                cmd[i] = cmd[i] ? cmd[i] : ' ';
                        cmd[len] = 0;
                        fclose(f);
                }
                tap_diag("PID %s holds %d BPF program fds: %s", de->d_name, n, cmd);
        }
        if (proc)
                closedir(proc);
}

int main(void)
{
        int progs = count_d9_named("prog"), maps = count_d9_named("map");

        tap_plan(2);
        tap_ok(progs == 0, "no d9_* BPF program left (%d)", progs);
        tap_ok(maps == 0, "no d9_* BPF map left (%d)", maps);
        if (progs || maps)
                name_holders();
        return tap_done();
}
