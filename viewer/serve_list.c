/* Segment listing for d9ctl serve. Walks the served folder (never following
 * symlinks) and describes each segment, reading service/instance/boot from
 * its path in either layout:
 *   d9d:   <service>/<pid>-<starttime>/trace.<N>.bin[.zst|.gz|.active]
 *   dial9: [<prefix>/]YYYY-MM-DD/HHMM/<service>/<instance...>/<boot>/<epoch>-<N>.bin.gz
 * so the browser can group segments per process without knowing layouts. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve_int.h"

#define LIST_MAX_DEPTH 12
#define LIST_MAX_PARTS 32

static const char *const segment_suffixes[] = { ".bin", ".bin.gz", ".bin.zst", ".bin.active" };

static int has_suffix(const char *s, const char *suffix)
{
        size_t n = strlen(s), m = strlen(suffix);
        return n > m && strcmp(s + n - m, suffix) == 0;
}

int serve_is_segment_name(const char *name)
{
        for (size_t i = 0; i < sizeof(segment_suffixes) / sizeof(*segment_suffixes); i++)
                if (has_suffix(name, segment_suffixes[i]))
                        return 1;
        return 0;
}

/* Matches a pattern where '9' stands for any digit and other bytes are literal. */
static int matches_digits(const char *s, const char *pattern)
{
        for (; *pattern; s++, pattern++)
                if (*pattern == '9' ? !isdigit((unsigned char)*s) : *s != *pattern)
                        return 0;
        return *s == '\0';
}

static int is_pid_start(const char *s)
{
        const char *dash = strchr(s, '-');
        if (!dash || dash == s || !dash[1])
                return 0;
        for (const char *p = s; *p; p++)
                if (p != dash && !isdigit((unsigned char)*p))
                        return 0;
        return 1;
}

static json_t *join_parts(char **parts, int from, int to)
{
        char buf[PATH_MAX] = "";
        for (int i = from; i < to; i++) {
                if (i > from)
                        strncat(buf, "/", sizeof(buf) - strlen(buf) - 1);
                strncat(buf, parts[i], sizeof(buf) - strlen(buf) - 1);
        }
        return json_string(buf);
}

static void describe_layout(json_t *seg, char *path)
{
        char *parts[LIST_MAX_PARTS];
        int n = 0;
        unsigned long long a, b;

        for (char *save = NULL, *p = strtok_r(path, "/", &save); p && n < LIST_MAX_PARTS;
             p = strtok_r(NULL, "/", &save))
                parts[n++] = p;
        const char *file = parts[n - 1];

        for (int i = 0; i + 5 < n; i++) {
                if (!matches_digits(parts[i], "9999-99-99") || !matches_digits(parts[i + 1], "9999"))
                        continue;
                json_object_set_new(seg, "layout", json_string("dial9"));
                json_object_set_new(seg, "service", json_string(parts[i + 2]));
                json_object_set_new(seg, "instance", join_parts(parts, i + 3, n - 2));
                json_object_set_new(seg, "boot", json_string(parts[n - 2]));
                if (sscanf(file, "%llu-%llu.bin", &a, &b) == 2) {
                        json_object_set_new(seg, "start", json_integer((json_int_t)a));
                        json_object_set_new(seg, "index", json_integer((json_int_t)b));
                }
                return;
        }
        if (n >= 3 && sscanf(file, "trace.%llu.bin", &a) == 1 && is_pid_start(parts[n - 2])) {
                json_object_set_new(seg, "layout", json_string("d9d"));
                json_object_set_new(seg, "service", json_string(parts[n - 3]));
                json_object_set_new(seg, "instance", json_string(parts[n - 2]));
                json_object_set_new(seg, "index", json_integer((json_int_t)a));
                return;
        }
        json_object_set_new(seg, "layout", json_string("other"));
        json_object_set_new(seg, "service", n > 1 ? json_string(parts[0]) : json_string(""));
        json_object_set_new(seg, "instance", n > 2 ? join_parts(parts, 1, n - 1) : json_string(""));
}

json_t *serve_segment_describe(const char *rel, uint64_t size, int64_t mtime)
{
        char copy[PATH_MAX];
        json_t *seg = json_pack("{s:s, s:I, s:I, s:s, s:b}", "path", rel,
                                "size", (json_int_t)size,
                                "mtime", (json_int_t)mtime,
                                "compression", has_suffix(rel, ".gz") ? "gzip" :
                                               has_suffix(rel, ".zst") ? "zstd" : "none",
                                "active", has_suffix(rel, ".active"));
        if (!seg)
                return NULL;
        snprintf(copy, sizeof(copy), "%s", rel);
        describe_layout(seg, copy);
        return seg;
}

static int add_segment(json_t *list, const char *rel, const struct stat *st)
{
        json_t *seg = serve_segment_describe(rel, (uint64_t)st->st_size, st->st_mtime);
        return seg && json_array_append_new(list, seg) == 0 ? 0 : -ENOMEM;
}

static int walk(int dirfd, const char *prefix, int depth, json_t *list)
{
        DIR *d = fdopendir(dirfd);
        struct dirent *de;
        int r = 0;

        if (!d) {
                close(dirfd);
                return -errno;
        }
        while (r == 0 && (de = readdir(d))) {
                char rel[PATH_MAX];
                struct stat st;

                if (de->d_name[0] == '.')
                        continue; /* ".", "..", hidden files */
                if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if ((size_t)snprintf(rel, sizeof(rel), "%s%s%s", prefix, *prefix ? "/" : "",
                                     de->d_name) >= sizeof(rel))
                        continue;
                if (S_ISDIR(st.st_mode) && depth < LIST_MAX_DEPTH) {
                        int sub = openat(dirfd, de->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0)
                                r = walk(sub, rel, depth + 1, list);
                } else if (S_ISREG(st.st_mode) && serve_is_segment_name(de->d_name)) {
                        r = add_segment(list, rel, &st);
                }
        }
        closedir(d);
        return r;
}

json_t *serve_list_segments(int rootfd)
{
        json_t *list = json_array();
        /* a fresh open file description: a dup would share the readdir offset */
        int dup_fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        if (!list || dup_fd < 0 || walk(dup_fd, "", 0, list) == -ENOMEM) {
                json_decref(list);
                return NULL;
        }
        return json_pack("{s:o}", "segments", list);
}
