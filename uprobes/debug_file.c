/* debug_file: find a separate debug file (the place stripped distro and
 * production binaries keep their symbols), the way gdb does: by build-id
 * under /usr/lib/debug/.build-id/, then by .gnu_debuglink next to the
 * binary, in its .debug/ subdirectory, and under /usr/lib/debug/<dir>/.
 * Paths are looked up inside the target's root (its mount namespace).
 * Candidates whose build-id differs from the executable's are rejected, so a
 * stale debug file can never label points with another build's names. */
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "uprobes_int.h"

static bool build_id_matches(const char *path, const char *want)
{
        struct elf_image *dbg = NULL;
        bool ok;

        if (access(path, R_OK) < 0 || d9_elf_image_open(path, &dbg, NULL) < 0)
                return false;
        _cleanup_free_ char *have = d9_elf_build_id(dbg);
        /* Without build-ids on both sides, trust the debuglink name. */
        ok = !want || !have || strcmp(want, have) == 0;
        d9_elf_image_free(dbg);
        return ok;
}

static char *try_path(char *path, const char *want)
{
        if (path && build_id_matches(path, want))
                return path;
        free(path);
        return NULL;
}

static struct uprobes_debug_lookup extra;

void uprobes_set_debug_lookup(const struct uprobes_debug_lookup *lookup)
{
        extra = lookup ? *lookup : (struct uprobes_debug_lookup){ 0 };
}

/* Build-id paths under one directory: the /usr/lib/debug layout and the
 * flat one debuginfod and `eu-unstrip` users keep. */
static char *try_build_id_dir(const char *dir, const char *id)
{
        const char *fmts[] = { "%s/.build-id/%.2s/%s.debug", "%s/%.2s/%s.debug" };

        for (size_t i = 0; i < 2; i++) {
                char *p = NULL;

                if (asprintf(&p, fmts[i], dir, id, id + 2) >= 0 && (p = try_path(p, id)))
                        return p;
        }
        return NULL;
}

static char *debug_file_extra(const char *id, const char *link)
{
        char *p;

        for (size_t i = 0; i < extra.n_dirs; i++) {
                if (id && strlen(id) > 2 && (p = try_build_id_dir(extra.dirs[i], id)))
                        return p;
                p = NULL;
                if (link && !strchr(link, '/') && asprintf(&p, "%s/%s", extra.dirs[i], link) >= 0 &&
                    (p = try_path(p, id)))
                        return p;
        }
        if (id && strlen(id) > 2 && extra.fetch && (p = extra.fetch(id, extra.ctx)))
                return try_path(p, id);
        return NULL;
}

char *uprobes_debug_file_by_build_id(const char *build_id, const char *root)
{
        char *p = NULL;

        if (!build_id || strlen(build_id) <= 2 || strspn(build_id, "0123456789abcdef") != strlen(build_id))
                return NULL;
        if (asprintf(&p, "%s/usr/lib/debug/.build-id/%.2s/%s.debug", root ? root : "", build_id,
                     build_id + 2) >= 0 && (p = try_path(p, build_id)))
                return p;
        return debug_file_extra(build_id, NULL);
}

static char *debug_file_standard(const struct elf_image *img, const char *root);

char *uprobes_debug_file_find(const struct elf_image *img, const char *root)
{
        char *p = debug_file_standard(img, root);

        if (!p && (extra.n_dirs || extra.fetch)) {
                _cleanup_free_ char *id = d9_elf_build_id(img);
                _cleanup_free_ char *link = d9_elf_debuglink(img);

                p = debug_file_extra(id, link);
        }
        return p;
}

static char *debug_file_standard(const struct elf_image *img, const char *root)
{
        _cleanup_free_ char *id = d9_elf_build_id(img);
        _cleanup_free_ char *link = NULL;
        _cleanup_free_ char *dir_copy = NULL;
        char *p = NULL;

        if (id && strlen(id) > 2) {
                asprintf(&p, "%s/usr/lib/debug/.build-id/%.2s/%s.debug", root, id, id + 2);
                if ((p = try_path(p, id)))
                        return p;
        }
        link = d9_elf_debuglink(img);
        if (!link || (strncmp(img->path, "/proc/", 6) == 0 && !strstr(img->path, "/root/") &&
                      strncmp(img->path, "/proc/self/fd/", 14) != 0))
                return NULL; /* no link, or /proc/PID/exe: no directory to look in */
        dir_copy = strdup(img->path);
        if (!dir_copy)
                return NULL;
        const char *dir = dirname(dir_copy);
        size_t rl = strlen(root);
        /* dir already carries the root prefix; /usr/lib/debug/<dir> needs it without. */
        const char *dir_in_root = strncmp(dir, root, rl) == 0 ? dir + rl : dir;
        const char *fmts[] = { "%s/%s", "%s/.debug/%s" };

        for (size_t i = 0; i < 2; i++) {
                p = NULL;
                asprintf(&p, fmts[i], dir, link);
                if (p && strcmp(p, img->path) != 0 && (p = try_path(p, id)))
                        return p;
                if (p)
                        free(p);
        }
        p = NULL;
        asprintf(&p, "%s/usr/lib/debug%s/%s", root, dir_in_root, link);
        return try_path(p, id);
}

char *uprobes_debug_file_for(const char *path, const char *root)
{
        struct elf_image *img = NULL;
        char *found;

        if (d9_elf_image_open(path, &img, NULL) < 0)
                return NULL;
        found = uprobes_debug_file_find(img, root ? root : "");
        d9_elf_image_free(img);
        return found;
}
