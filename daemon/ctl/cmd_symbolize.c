/* d9ctl symbolize: names what sealed segments left unnamed ("[unnamed]
 * FILE 0x..." frames, "0x..." task labels) from debug files found by
 * build-id now: the standard places, --debug-dir directories, and the
 * debuginfod servers in DEBUGINFOD_URLS (daemon/symbolize/resymbolize.c does the
 * work). Each segment is replaced atomically by a new sealed file in the
 * same folder: written to a temporary file made with O_EXCL|O_NOFOLLOW,
 * given the original's owner, mode and ACL (the access d9d gave the
 * trace), fsync'ed, then renamed over it. Input is opened with O_NOFOLLOW.
 * A segment with nothing to name is left alone; a folder stands for the
 * trace files in it, as for dump and report. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "d9ctl.h"
#include "trace_read.h"
#include "d9proto.h"
#include "proto/d9control.h"
#include "daemon/symbolize/debuginfo.h"
#include "daemon/symbolize/resymbolize.h"

/* resymbolize's output sink: the rewritten segment, in memory. */
static int buf_put(void *ctx, const uint8_t *data, size_t len)
{
        return d9_buf_append(ctx, data, len);
}

static int read_fd(int fd, size_t size, uint8_t **out)
{
        uint8_t *buf = malloc(size ? size : 1);
        ssize_t got = buf ? d9_read_full(fd, buf, size, -1) : -ENOMEM;

        if (got != (ssize_t)size) {
                free(buf);
                return got < 0 ? (int)got : -EIO; /* shrank under us */
        }
        *out = buf;
        return 0;
}

/* The new file gets what d9d gave the old one: owner (when we may), mode
 * and the POSIX ACL that lets the recording user and the readers group in. */
static int copy_access(int from, int to, const struct stat *st)
{
        char acl[512];
        ssize_t n;

        if (geteuid() == 0 && fchown(to, st->st_uid, st->st_gid) < 0)
                return -errno;
        if (fchmod(to, st->st_mode & 07777) < 0)
                return -errno;
        n = fgetxattr(from, "system.posix_acl_access", acl, sizeof(acl));
        if (n > 0 && fsetxattr(to, "system.posix_acl_access", acl, (size_t)n, 0) < 0)
                return -errno;
        return 0;
}

/* Writes data as base's replacement in the folder dfd: a temporary file
 * beside it, then rename. */
static int replace_file(int dfd, const char *base, int old_fd, const struct stat *st, const uint8_t *data,
                        size_t len, const char **why)
{
        char tmp[NAME_MAX + 64];
        int fd, r;

        snprintf(tmp, sizeof(tmp), ".%.200s.symbolize-%d", base, (int)getpid());
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
                r = -errno;
                *why = r == -EACCES ? "cannot write in its folder" : "cannot create the new file";
                return r;
        }
        r = d9_write_all(fd, data, len);
        if (r < 0)
                *why = "writing the new file failed";
        if (!r && (r = copy_access(old_fd, fd, st)) < 0)
                *why = "cannot give the new file the trace's owner and access";
        if (!r && fsync(fd) < 0) {
                r = -errno;
                *why = "fsync of the new file failed";
        }
        close(fd);
        if (!r && renameat(dfd, tmp, dfd, base) < 0) {
                r = -errno;
                *why = "cannot rename the new file into place";
        }
        if (r < 0)
                unlinkat(dfd, tmp, 0);
        else
                fsync(dfd);
        return r;
}

static int symbolize_one(const char *path)
{
        struct resym_stats st;
        struct d9_buf out = { 0 };
        uint8_t *file = NULL, *raw = NULL, *packed = NULL;
        size_t raw_len = 0, packed_len = 0;
        const char *why = "";
        struct stat sb;
        char dir_buf[PATH_MAX], base_buf[PATH_MAX];
        int dfd, fd, r;

        /* The file is opened in its folder and replaced there: both names
         * refer to the same directory even if the path is changed under us. */
        snprintf(dir_buf, sizeof(dir_buf), "%s", path);
        snprintf(base_buf, sizeof(base_buf), "%s", path);
        const char *base = basename(base_buf);
        dfd = open(dirname(dir_buf), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        fd = dfd < 0 ? -1 : openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                fprintf(stderr, "d9ctl symbolize: %s: %s\n", path,
                        r == -ELOOP ? "is a symbolic link (not followed)" : strerror(-r));
                if (dfd >= 0)
                        close(dfd);
                return 1;
        }
        if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
                fprintf(stderr, "d9ctl symbolize: %s: not a regular file\n", path);
                close(fd);
                close(dfd);
                return 1;
        }
        r = read_fd(fd, (size_t)sb.st_size, &file);
        enum d9_compress kind = r < 0 ? D9_COMPRESS_NONE : d9_compress_detect(file, (size_t)sb.st_size);
        if (!r)
                r = d9_decompress(file, (size_t)sb.st_size, d9_decompress_cap((size_t)sb.st_size), &raw, &raw_len);
        if (r < 0) {
                fprintf(stderr, "d9ctl symbolize: %s: cannot read it: %s\n", path,
                        r == -EFBIG ? "expands beyond the decompression cap" : strerror(-r));
                goto out;
        }
        r = resymbolize(raw, raw_len, buf_put, &out, &st, &why);
        if (r < 0) {
                fprintf(stderr, "d9ctl symbolize: %s: %s\n", path, why);
                goto out;
        }
        if (!st.mappings) {
                fprintf(stderr, "d9ctl symbolize: %s: no mapping records (sealed by a d9d that did not write them): "
                        "nothing can be named\n", path);
                r = -ENODATA;
                goto out;
        }
        /* A rewrite is never shorter than the header: an empty result would
         * be a bug, and must not replace recorded data. */
        if (st.frames_named + st.labels_named && out.len < 5) {
                fprintf(stderr, "d9ctl symbolize: %s: the rewrite came out empty (unchanged)\n", path);
                r = -EIO;
                goto out;
        }
        if (st.frames_named + st.labels_named) {
                if (kind != D9_COMPRESS_NONE)
                        r = d9_compress_buf(out.data, out.len, kind, 0, &packed, &packed_len);
                if (r < 0) {
                        fprintf(stderr, "d9ctl symbolize: %s: compressing failed: %s\n", path, strerror(-r));
                        goto out;
                }
                r = replace_file(dfd, base, fd, &sb, packed ? packed : out.data, packed ? packed_len : out.len, &why);
                if (r < 0) {
                        fprintf(stderr, "d9ctl symbolize: %s: %s: %s (unchanged)\n", path, why, strerror(-r));
                        goto out;
                }
        }
        printf("%s: named %llu of %llu frames, %llu of %llu task labels; debug files for %llu of %llu build-ids%s%s\n",
               path, (unsigned long long)st.frames_named, (unsigned long long)st.frames,
               (unsigned long long)st.labels_named, (unsigned long long)st.labels,
               (unsigned long long)st.modules_found, (unsigned long long)st.modules,
               st.missing[0] ? ", none for " : "", st.missing);
        if (st.missing[0] && *debuginfo_failure_of(st.missing))
                printf("%s: debuginfod's answer: %s\n", path, debuginfo_failure_of(st.missing));
out:
        close(fd);
        close(dfd);
        free(file);
        free(raw);
        free(packed);
        d9_buf_free(&out);
        return r < 0 ? 1 : 0;
}

int d9ctl_cmd_symbolize(int argc, char **argv)
{
        static const struct option opts[] = {
                { "debug-dir", required_argument, NULL, 'd' },
                { "no-debuginfod", no_argument, NULL, 'N' },
                { "timeout", required_argument, NULL, 't' },
                {},
        };
        const char **dirs = calloc((size_t)argc, sizeof(*dirs));
        size_t n_dirs = 0;
        bool debuginfod = true;
        uint64_t timeout_ms = 30000;
        int opt, failed = 0;

        if (!dirs)
                return 1;
        while ((opt = getopt_long(argc, argv, "d:", opts, NULL)) != -1) {
                switch (opt) {
                case 'd': {
                        struct stat st;
                        if (stat(optarg, &st) < 0 || !S_ISDIR(st.st_mode)) {
                                free(dirs);
                                return d9ctl_usage_error("symbolize", "--debug-dir %s is not a directory", optarg);
                        }
                        dirs[n_dirs++] = optarg;
                        break;
                }
                case 'N':
                        debuginfod = false;
                        break;
                case 't':
                        if (d9_parse_duration_ms(optarg, &timeout_ms) < 0 || !timeout_ms) {
                                free(dirs);
                                return d9ctl_usage_error("symbolize", "--timeout expects a duration such as 30s");
                        }
                        break;
                default:
                        free(dirs);
                        return 2; /* getopt named the option */
                }
        }
        if (optind >= argc) {
                free(dirs);
                return d9ctl_usage_error("symbolize", "no segment given");
        }
        struct debuginfo_opts dopts = {
                .dirs = dirs, .n_dirs = n_dirs, .debuginfod = debuginfod, .timeout_ms = timeout_ms,
        };
        char **paths = NULL, why[512];
        size_t n_paths = 0;
        for (int i = optind; i < argc; i++)
                if (d9ctl_trace_paths_add(argv[i], &paths, &n_paths, why, sizeof(why)) < 0) {
                        fprintf(stderr, "d9ctl symbolize: %s\n", why);
                        failed = 1;
                }
        debuginfo_setup(&dopts);
        debuginfo_allow_network(true);
        for (size_t i = 0; i < n_paths; i++)
                failed |= symbolize_one(paths[i]);
        debuginfo_setup(NULL);
        d9ctl_trace_paths_free(paths, n_paths);
        free(dirs);
        return failed;
}
