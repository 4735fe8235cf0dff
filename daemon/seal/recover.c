/* recover.c: crash recovery. A torn segment ends inside a frame; the
 * decoder finds the longest prefix made of whole frames, the file is
 * truncated there and sealed like any other segment. A file with not even a
 * whole header is removed: it holds nothing a reader could use. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/cleanup.h"
#include "daemon/core/log.h"
#include "proto/d9proto.h"
#include "daemon/seal/recover.h"
#include "daemon/seal/sealer.h"

long long seal_recover_trim(const char *path)
{
        uint8_t *raw = NULL;
        size_t len = 0, keep;
        int r = d9_read_trace_file(path, &raw, &len, NULL);

        if (r < 0)
                return r;
        keep = d9_valid_prefix_len(raw, len);
        free(raw);
        if (keep == len)
                return 0;
        if (truncate(path, (off_t)keep) < 0)
                return -errno;
        return (long long)(len - keep);
}

static struct sealer *recover_sealer;
static int recover_compression, recover_queued;

static int recover_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        size_t n = strlen(path);
        long long cut;

        /* The sealer's half-written renaming of an .active file (sealer.c,
         * rename_labels): the .active file itself is whole, this is not. */
        if (type == FTW_F && n > 13 && !strcmp(path + n - 13, ".active.names")) {
                unlink(path);
                return 0;
        }
        if (type != FTW_F || n < 7 || strcmp(path + n - 7, ".active"))
                return 0;
        cut = seal_recover_trim(path);
        if (cut < 0) {
                log_error("recovery: cannot read %s: %s", path, strerror((int)-cut));
                return 0;
        }
        struct stat now;
        if (stat(path, &now) == 0 && now.st_size == 0) {
                log_warn("recovery: %s held no whole frame; removed", path);
                unlink(path);
                return 0;
        }
        struct seal_job *job = calloc(1, sizeof(*job));
        if (!job || strlen(path) >= sizeof(job->active)) {
                free(job);
                return 0;
        }
        strcpy(job->active, path);
        /* Outside a <service>/<pid>-<starttime> folder it stays unshipped,
         * as before: only its owner's session could have said whose it is. */
        (void)seal_job_identity_from_path(job, path);
        job->root_fd = -1;
        job->compression = (enum d9_compress)recover_compression;
        log_info("recovery: %s left by an earlier run, %lld torn bytes cut; sealing it", path, cut);
        sealer_submit(recover_sealer, job);
        recover_queued++;
        return 0;
}

int seal_recover_active_segments(const char *traces_dir, struct sealer *sealer, int compression)
{
        recover_sealer = sealer;
        recover_compression = compression;
        recover_queued = 0;
        if (nftw(traces_dir, recover_one, 16, FTW_PHYS) < 0 && errno != ENOENT)
                return -errno;
        return recover_queued;
}
