/* Shipper jobs on disk: a small "name=value" file per pending segment holding
 * everything needed to upload it after a restart (path, key, metadata), so
 * resuming needs neither the daemon's session state nor the trace decoder. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/ship/ship_job.h"

static const char *const meta_names[SHIP_JOB_MAX_META] = {
        "service", "host", "pid", "boot-id", "segment-index", "start-time",
};

void ship_job_free(struct ship_job *job)
{
        if (!job)
                return;
        free(job->path);
        free(job->job_path);
        free(job->key);
        free(job->content_type);
        for (size_t i = 0; i < job->n_meta; i++)
                free((char *)job->meta[i].value);
        free(job);
}

/* ".bin.gz" of ".../trace.3.bin.gz": everything from ".bin", else the last
 * extension; dial9's browser wants "<epoch>-<index>.bin" in the name. */
static const char *segment_ext(const char *path)
{
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        const char *bin = strstr(base, ".bin");
        if (bin)
                return bin;
        return strrchr(base, '.') ? strrchr(base, '.') : ".bin";
}

static const char *content_type_for(const char *ext)
{
        size_t n = strlen(ext);
        if (n >= 3 && !strcmp(ext + n - 3, ".gz"))
                return "application/gzip";
        if (n >= 4 && !strcmp(ext + n - 4, ".zst"))
                return "application/zstd";
        return "application/octet-stream";
}

static uint64_t fnv1a(const char *s)
{
        uint64_t h = 1469598103934665603ull;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ull;
        return h;
}

static int write_job_file(const struct ship_job *job)
{
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s.tmp", job->job_path);
        FILE *f = fopen(tmp, "we");
        if (!f)
                return -errno;
        fprintf(f, "path=%s\nkey=%s\ncontent_type=%s\n", job->path, job->key, job->content_type);
        for (size_t i = 0; i < job->n_meta; i++)
                fprintf(f, "meta.%s=%s\n", job->meta[i].name, job->meta[i].value);
        int err = fflush(f) || fsync(fileno(f)) ? -errno : 0;
        if (fclose(f) && !err)
                err = -errno;
        if (!err && rename(tmp, job->job_path) < 0)
                err = -errno;
        if (err) {
                unlink(tmp);
                return err;
        }
        /* The rename itself must survive a crash too. */
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", job->job_path);
        *strrchr(dir, '/') = 0;
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
        }
        return 0;
}

static int fill_meta(struct ship_job *job, const char *instance, const struct segment_meta *m,
                     int64_t start_s)
{
        char values[SHIP_JOB_MAX_META][64];
        snprintf(values[2], 64, "%d", m->pid);
        snprintf(values[4], 64, "%llu", (unsigned long long)m->index);
        snprintf(values[5], 64, "%lld", (long long)start_s);
        const char *v[SHIP_JOB_MAX_META] = { m->service, instance, values[2], m->boot_id,
                                             values[4], values[5] };
        for (size_t i = 0; i < SHIP_JOB_MAX_META; i++) {
                job->meta[i].name = meta_names[i];
                if (!(job->meta[i].value = strdup(v[i])))
                        return -ENOMEM;
                job->n_meta = i + 1;
        }
        return 0;
}

int ship_job_create(const struct ship_config *cfg, const char *instance, const char *sealed_path,
                    const struct segment_meta *m, struct ship_job **out)
{
        char key[1024], job_path[PATH_MAX], abs[PATH_MAX];
        struct stat st;
        if (!realpath(sealed_path, abs) || stat(abs, &st) < 0)
                return -errno;
        int64_t start_s = m->start_realtime_ns > 0 ? m->start_realtime_ns / 1000000000 : st.st_mtime;
        const char *ext = segment_ext(abs);
        int err = s3_dial9_key(key, sizeof key, cfg->s3.prefix, start_s, m->service, instance,
                               m->boot_id, m->index, ext);
        if (err < 0)
                return err;
        snprintf(job_path, sizeof job_path, "%s/%016llx.job", cfg->state_dir,
                 (unsigned long long)fnv1a(abs));
        struct ship_job *job = calloc(1, sizeof *job);
        if (!job)
                return -ENOMEM;
        job->path = strdup(abs);
        job->job_path = strdup(job_path);
        job->key = strdup(key);
        job->content_type = strdup(content_type_for(ext));
        err = job->path && job->job_path && job->key && job->content_type ? 0 : -ENOMEM;
        if (!err)
                err = fill_meta(job, instance, m, start_s);
        if (!err)
                err = write_job_file(job);
        if (err) {
                ship_job_free(job);
                return err;
        }
        *out = job;
        return 0;
}

static int parse_line(struct ship_job *job, char *line)
{
        char *eq = strchr(line, '=');
        if (!eq)
                return -EBADMSG;
        *eq = 0;
        line[strcspn(line, "\n")] = 0;
        char *value = strndup(eq + 1, strcspn(eq + 1, "\n"));
        char **dst = !strcmp(line, "path") ? &job->path : !strcmp(line, "key") ? &job->key
                   : !strcmp(line, "content_type") ? &job->content_type : NULL;
        if (!value)
                return -ENOMEM;
        if (dst) {
                free(*dst);
                *dst = value;
                return 0;
        }
        for (size_t i = 0; i < SHIP_JOB_MAX_META; i++) {
                if (strncmp(line, "meta.", 5) || strcmp(line + 5, meta_names[i]) ||
                    job->n_meta >= SHIP_JOB_MAX_META)
                        continue;
                job->meta[job->n_meta].name = meta_names[i];
                job->meta[job->n_meta++].value = value;
                return 0;
        }
        free(value); /* a field from a newer d9d: not needed to upload */
        return 0;
}

int ship_job_load(const char *job_path, struct ship_job **out)
{
        FILE *f = fopen(job_path, "re");
        if (!f)
                return -errno;
        struct ship_job *job = calloc(1, sizeof *job);
        char line[4096];
        int err = job && (job->job_path = strdup(job_path)) ? 0 : -ENOMEM;
        while (!err && fgets(line, sizeof line, f))
                err = parse_line(job, line);
        fclose(f);
        if (!err && (!job->path || !job->key || !job->content_type))
                err = -EBADMSG;
        if (err) {
                ship_job_free(job);
                return err;
        }
        *out = job;
        return 0;
}

int ship_job_forget(const struct ship_job *job)
{
        return unlink(job->job_path) < 0 && errno != ENOENT ? -errno : 0;
}
