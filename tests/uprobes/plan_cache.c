/* The plan cache (uprobes/plan_cache.c) on a real Tokio target: a second
 * plan of the same file is a copy of the first, point for point; after a
 * write to the file (its ctime moves) it is planned again. TAP.
 * usage: plan-cache TOKIO_BINARY */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tap.h"
#include "uprobes.h"

static int copy_file(const char *from, const char *to)
{
        char cmd[8192];

        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
        return system(cmd);
}

static int same_points(const struct probe_plan *a, const struct probe_plan *b)
{
        if (a->n_points != b->n_points || a->n_missing != b->n_missing ||
            a->vtable_id_off != b->vtable_id_off || strcmp(a->build_id ? a->build_id : "", b->build_id ? b->build_id : ""))
                return 0;
        for (size_t i = 0; i < a->n_points; i++) {
                const struct probe_point *x = &a->points[i], *y = &b->points[i];
                if (x->file_offset != y->file_offset || x->kind != y->kind || x->cookie != y->cookie ||
                    x->skipped != y->skipped || strcmp(x->label ? x->label : "", y->label ? y->label : ""))
                        return 0;
        }
        for (size_t i = 0; i < a->n_missing; i++)
                if (strcmp(a->missing[i].reason, b->missing[i].reason))
                        return 0;
        return 1;
}

int main(int argc, char **argv)
{
        char dir[] = "/tmp/d9-plan-cache.XXXXXX", path[256];
        struct probe_plan *p1 = NULL, *p2 = NULL, *p3 = NULL;
        char *err = NULL;

        if (argc != 2 || !mkdtemp(dir))
                bail("usage: plan-cache TOKIO_BINARY");
        snprintf(path, sizeof(path), "%s/target", dir);
        if (copy_file(argv[1], path) != 0)
                bail("cannot copy %s", argv[1]);
        ok(probe_plan_for_file(path, &p1, &err) == 0 && p1 && !p1->from_cache && p1->n_points > 0,
           "the first plan of a file is built");
        ok(probe_plan_for_file(path, &p2, &err) == 0 && p2 && p2->from_cache, "the second is a copy from the cache");
        ok(p1 && p2 && same_points(p1, p2), "point for point the same plan (offsets, kinds, cookies, labels, missing)");
        ok(p1 && p2 && p2->exe_fd >= 0 && p2->exe_fd != p1->exe_fd && p2->attach_path &&
           strcmp(p2->attach_path, p1->attach_path) != 0, "the copy attaches through its own descriptor of the file");
        /* The same byte written back: contents equal, ctime moved. */
        int fd = open(path, O_RDWR);
        char c;
        ok(fd >= 0 && pread(fd, &c, 1, 0) == 1 && pwrite(fd, &c, 1, 0) == 1, "rewrote the file's first byte");
        if (fd >= 0)
                close(fd);
        ok(probe_plan_for_file(path, &p3, &err) == 0 && p3 && !p3->from_cache,
           "after a write the file is planned again, not taken from the cache");
        ok(p1 && p3 && same_points(p1, p3), "and gives the same plan");
        probe_plan_free(p1);
        probe_plan_free(p2);
        probe_plan_free(p3);
        free(err);
        unlink(path);
        rmdir(dir);
        return tap_done();
}
