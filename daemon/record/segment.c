/* segment.c: writing trace.N.bin.active files. The encoder buffers events
 * and its flush callback appends whole buffers to the file; nothing here
 * fsyncs or compresses (that is the sealer's job, off the drain loop). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/cleanup.h"
#include "daemon/core/d9d.h"
#include "daemon/core/log.h"
#include "daemon/core/segment_name.h"
#include "daemon/record/segment.h"
#include "daemon/core/trace_access.h"

#define SEGMENT_BUF (256 * 1024)

static int mkdir_p(const char *path)
{
        char tmp[PATH_MAX];

        if (strlen(path) >= sizeof(tmp))
                return -ENAMETOOLONG;
        strcpy(tmp, path);
        for (char *p = tmp + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = 0;
                if (mkdir(tmp, 0711) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

int segment_writer_init(struct segment_writer *sw, const char *dir)
{
        DIR *dh;
        struct dirent *de;
        int r;

        memset(sw, 0, sizeof(*sw));
        sw->fd = -1;
        if (strlen(dir) >= sizeof(sw->dir))
                return -ENAMETOOLONG;
        strcpy(sw->dir, dir);
        r = mkdir_p(dir);
        if (r < 0)
                return r;
        /* Never reuse an N: a folder can hold segments of an earlier attach. */
        dh = opendir(dir);
        if (!dh)
                return -errno;
        while ((de = readdir(dh))) {
                int n = d9d_segment_index_of(de->d_name);
                if (n >= 0 && (unsigned)n >= sw->index)
                        sw->index = (unsigned)n + 1;
        }
        closedir(dh);
        sw->buf = malloc(SEGMENT_BUF);
        return sw->buf ? 0 : -ENOMEM;
}

static int segment_flush_to_file(void *ctx, const uint8_t *data, size_t len)
{
        struct segment_writer *sw = ctx;

        if (sw->error)
                return sw->error;
        sw->error = d9_write_all(sw->fd, data, len);
        if (sw->error < 0)
                log_error("writing %s failed: %s", sw->active_path, strerror(-sw->error));
        else
                sw->bytes += len;
        return sw->error;
}

/* A ClockSyncEvent for monotonic instant at (0: now, else not after now),
 * its stamp in *ts (may be NULL). */
static int clock_sync_at(struct d9_enc *enc, uint64_t at, uint64_t *ts)
{
        struct timespec a, rt, b;

        /* The midpoint of two monotonic reads brackets the realtime read. */
        clock_gettime(CLOCK_MONOTONIC, &a);
        clock_gettime(CLOCK_REALTIME, &rt);
        clock_gettime(CLOCK_MONOTONIC, &b);
        uint64_t ta = (uint64_t)a.tv_sec * 1000000000ull + (uint64_t)a.tv_nsec;
        uint64_t tb = (uint64_t)b.tv_sec * 1000000000ull + (uint64_t)b.tv_nsec;
        uint64_t real = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
        uint64_t mono = ta + (tb - ta) / 2;

        if (at && at < mono) {
                real -= mono - at;
                mono = at;
        }
        if (ts)
                *ts = mono;
        return d9_enc_clock_sync(enc, mono, real);
}

int segment_clock_sync(struct d9_enc *enc)
{
        return clock_sync_at(enc, 0, NULL);
}

void segment_start_at(struct segment_writer *sw, uint64_t ts)
{
        sw->start_at = ts;
}

int segment_open(struct segment_writer *sw, const struct d9_kv *meta, uint32_t n_meta)
{
        int r;

        if (sw->fd >= 0)
                return -EBUSY;
        if ((size_t)snprintf(sw->active_path, sizeof(sw->active_path), "%.4000s/trace.%u.bin.active", sw->dir,
                             sw->index) >= sizeof(sw->active_path))
                return -ENAMETOOLONG;
        /* Private until sealed: the sealer grants the recording uid read. */
        sw->fd = open(sw->active_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (sw->fd < 0)
                return -errno;
        sw->bytes = 0;
        sw->error = 0;
        sw->first_ts = sw->last_ts = 0;
        sw->opened_ms = d9_now_ms();
        r = d9_enc_new(&sw->enc);
        if (r < 0) {
                /* Nothing written: no segment, and no encoder for segment_close. */
                close(sw->fd);
                sw->fd = -1;
                unlink(sw->active_path);
                return r;
        }
        d9_enc_set_output(sw->enc, sw->buf, SEGMENT_BUF, segment_flush_to_file, sw);
        uint64_t sync_ts = 0;
        r = clock_sync_at(sw->enc, sw->start_at, &sync_ts);
        sw->start_at = 0;
        /* Zeros for the sealer to fill (proto/segment_span.c): a listing
         * then reads when the segment starts and how long it lasts from
         * its first bytes. */
        if (!r)
                r = d9_enc_segment_span(sw->enc, sync_ts, &(struct d9_segment_span){ 0 });
        if (!r)
                r = d9_enc_new_stream(sw->enc);
        if (!r)
                r = d9_enc_segment_metadata(sw->enc, d9_now_ns(), meta, n_meta);
        if (!r)
                r = segment_clock_sync(sw->enc);
        if (!r)
                r = d9_enc_new_stream(sw->enc); /* events follow in a stream of their own */
        /* Metadata hits the disk at once so even a segment torn by a crash
         * right after opening says whose it is. */
        if (!r)
                r = d9_enc_flush(sw->enc);
        return r;
}

int segment_writer_grant(const struct segment_writer *sw, uid_t reader)
{
        char parent[PATH_MAX], *slash;
        int fd, r;

        fd = open(sw->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        r = d9d_trace_access_grant(fd, reader, true, true);
        close(fd);
        snprintf(parent, sizeof(parent), "%s", sw->dir);
        slash = strrchr(parent, '/');
        if (r < 0 || !slash)
                return r;
        *slash = 0;
        fd = open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        /* The service folder: traversed, not listed, by the reader. */
        r = d9d_trace_access_grant(fd, 0, true, false);
        close(fd);
        return r;
}

uint64_t segment_size(const struct segment_writer *sw)
{
        size_t pending = 0;

        if (sw->enc)
                d9_enc_output(sw->enc, &pending);
        return sw->bytes + pending;
}

int segment_close(struct segment_writer *sw, char *path_out, size_t len)
{
        int r;

        if (sw->fd < 0)
                return -ENOENT;
        r = d9_enc_flush(sw->enc);
        d9_enc_free(sw->enc);
        sw->enc = NULL;
        close(sw->fd);
        sw->fd = -1;
        if (path_out)
                snprintf(path_out, len, "%s", sw->active_path);
        sw->index++;
        return r < 0 ? r : sw->error;
}

void segment_writer_destroy(struct segment_writer *sw)
{
        if (sw->fd >= 0)
                segment_close(sw, NULL, 0);
        free(sw->buf);
        sw->buf = NULL;
}
