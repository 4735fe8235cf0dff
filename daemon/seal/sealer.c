/* sealer.c: sealing thread and the seal steps. A segment is sealed by
 * (1) appending a SymbolTableEntry for every address its callchains use,
 * (2) compressing it into a temporary file that is fsync'ed, (3) renaming
 * that into place and removing the .active file, then fsyncing the folder.
 * A crash at any step leaves either the .active file (recovered at the
 * next start) or the finished segment, never a half-written sealed one. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/seal/budget.h"
#include "daemon/ship/ship.h"
#include "daemon/core/cleanup.h"
#include "daemon/core/d9d.h"
#include "daemon/symbolize/debuginfo.h"
#include "daemon/core/log.h"
#include "daemon/seal/sealer.h"
#include "daemon/core/trace_access.h"
#include "daemon/symbolize/jit_map.h"
#include "uprobes/uprobes.h"
#include "daemon/symbolize/resymbolize.h"
#include "daemon/core/segment_name.h"
#include "daemon/symbolize/symbolize.h"

struct sealer {
        struct d9_watch w;      /* eventfd: "jobs finished" for the main loop */
        struct d9d *d;
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct seal_job *todo, **todo_tail;
        struct seal_job *done;
        bool stop;
        struct sealer_stats st;
        void (*on_done)(struct d9d *d, struct seal_job *job);
        struct shipper *shipper;
};

void sealer_set_shipper(struct sealer *s, struct shipper *sh)
{
        s->shipper = sh;
}

int seal_job_identity_from_path(struct seal_job *job, const char *path)
{
        char dir[4096], *file, *target, *service;
        unsigned long long starttime = 0;
        int pid = 0, n;

        snprintf(dir, sizeof(dir), "%s", path);
        file = strrchr(dir, '/');
        if (!file)
                return -EINVAL;
        *file++ = 0;
        target = strrchr(dir, '/');
        if (!target)
                return -EINVAL;
        *target++ = 0;
        service = strrchr(dir, '/');
        if (!service || sscanf(target, "%d-%llu", &pid, &starttime) != 2 || (n = d9d_segment_index_of(file)) < 0 ||
            strlen(service + 1) >= sizeof(job->service))
                return -EINVAL;
        snprintf(job->service, sizeof(job->service), "%s", service + 1);
        job->pid = pid;
        job->starttime = starttime;
        job->index = (unsigned)n;
        return 0;
}

static void ship_sealed(struct shipper *sh, const struct seal_job *job)
{
        char boot_id[32];

        if (!job->service[0])
                return;
        s3_dial9_boot_id(boot_id, job->starttime ^ ((uint64_t)job->pid << 32), job->pid);
        struct segment_meta m = {
                .service = job->service, .boot_id = boot_id, .pid = job->pid, .index = job->index,
                .start_realtime_ns = (int64_t)job->start_realtime_ns,
        };
        int r = shipper_enqueue(sh, job->sealed, &m);
        if (r < 0)
                log_error("cannot queue %s for upload: %s", job->sealed, strerror(-r));
}

struct addr_set {
        uint64_t *v;
        size_t n, cap;
        uint64_t first_realtime_ns;
        struct d9_segment_span span;    /* what the listing reads (segment_span.c) */
        bool unnamed_labels;    /* task labels a debug file could name */
        char label_build_id[128];       /* of the executable they are in */
};

static int collect_addrs(const struct d9_dec_event *ev, void *ctx)
{
        struct addr_set *set = ctx;

        /* ts 0: seal-time records of an earlier, interrupted seal. */
        if (ev->has_timestamp && ev->ts && strcmp(ev->schema->name, D9_SPAN_EVENT)) {
                /* The first written, not the earliest: the segment's
                 * span starts as it opened (its ClockSyncEvent), so a
                 * listing's segments tile the recording; older events
                 * (off-CPU samples, other CPUs' records) do occur. */
                if (!set->span.first_ts)
                        set->span.first_ts = ev->ts;
                if (ev->ts > set->span.last_ts)
                        set->span.last_ts = ev->ts;
                set->span.events++;
        }
        if (!set->first_realtime_ns && !strcmp(ev->schema->name, "ClockSyncEvent") && ev->values[0].present)
                set->first_realtime_ns = ev->values[0].u;
        if (!strcmp(ev->schema->name, "D9TaskLabelAddrEvent")) {
                set->unnamed_labels = true;
                for (uint16_t i = 0; i < ev->schema->nfields && !set->label_build_id[0]; i++)
                        if (!strcmp(ev->schema->fields[i].name, "build_id") && ev->values[i].resolved &&
                            ev->values[i].str.len < sizeof(set->label_build_id))
                                memcpy(set->label_build_id, ev->values[i].str.p, ev->values[i].str.len);
        }
        for (uint16_t i = 0; i < ev->schema->nfields && !set->unnamed_labels; i++)
                set->unnamed_labels = ev->values[i].type == D9_T_POOLED_STRING && ev->values[i].resolved &&
                                      ev->values[i].str.len > 10 && !memcmp(ev->values[i].str.p, "[unnamed] ", 10) &&
                                      !strcmp(ev->schema->fields[i].name, "spawn_loc");
        for (uint16_t i = 0; i < ev->schema->nfields; i++) {
                const struct d9_value *v = &ev->values[i];
                if (!v->present || (v->type != D9_T_POOLED_STACK && v->type != D9_T_STACK))
                        continue;
                for (uint32_t k = 0; k < v->stack.n; k++) {
                        if (set->n == set->cap) {
                                uint64_t *more = realloc(set->v, (set->cap = set->cap ? set->cap * 2 : 1024) * 8);
                                if (!more)
                                        return -ENOMEM;
                                set->v = more;
                        }
                        set->v[set->n++] = d9_value_stack_addr(v, k);
                }
        }
        return 0;
}

static int u64_cmp(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

static int append_fd_write(void *ctx, const uint8_t *data, size_t len)
{
        return d9_write_all(*(int *)ctx, data, len);
}

/* What `d9ctl symbolize` needs to name an address later, per executable
 * file mapping (like perf's mmap records or pprof's mappings): dial9's
 * readers keep it as a custom event and ignore it. */
static const struct d9_field_def mapping_fields[] = {
        { "start", D9_T_VARINT },
        { "end", D9_T_VARINT },
        { "file_offset", D9_T_VARINT },
        { "load_bias", D9_T_VARINT | D9_T_OPTIONAL },
        { "path", D9_T_POOLED_STRING },
        { "build_id", D9_T_POOLED_STRING },
};
static const struct d9_schema_def mapping_schema = { "D9MappingEvent", 6, mapping_fields };

static int append_mappings(struct d9_enc *enc, const struct symbolizer *sym)
{
        int schema = d9_enc_declare(enc, &mapping_schema), r = schema < 0 ? schema : 0;
        struct sym_mapping m;

        for (size_t i = 0; !r && symbolizer_mapping(sym, i, &m); i++) {
                struct d9_enc_value v[6] = {
                        { .u = m.start }, { .u = m.end }, { .u = m.offset },
                        { .present = m.bias_known, .u = m.bias },
                };
                r = d9_enc_intern_string(enc, m.path, strlen(m.path), &v[4].atom);
                if (!r)
                        r = d9_enc_intern_string(enc, m.build_id, strlen(m.build_id), &v[5].atom);
                if (!r)
                        r = d9_enc_event(enc, schema, 0, v);
        }
        return r;
}

/* Symbols go in a stream of their own at the end of the file. */
static int append_symbols(struct seal_job *job, const uint64_t *addrs, size_t n)
{
        _cleanup_close_ int fd = open(job->active, O_WRONLY | O_APPEND | O_CLOEXEC);
        struct symbolizer *sym;
        struct jit_map *jit = NULL;
        struct d9_enc *enc = NULL;
        uint8_t buf[64 * 1024];
        uint32_t empty;
        int r;

        if (fd < 0)
                return -errno;
        sym = symbolizer_new_for_addrs(job->root_fd, job->maps, addrs, n);
        /* Read at every seal: the JIT appends as it compiles. Absent for
         * most targets; refused (and said once) when it is not theirs. */
        if (job->root_fd >= 0 && job->target_nspid > 0) {
                r = jit_map_load(job->root_fd, job->target_nspid, job->target_uid, &jit);
                if (r < 0 && r != -ENOENT)
                        log_warn("%s: /tmp/perf-%d.map of the target not read: %s", job->active,
                                 (int)job->target_nspid, r == -EPERM ? "not owned by the target's user"
                                 : r == -EBADFD ? "not a regular file" : strerror(-r));
        }
        r = sym ? d9_enc_new(&enc) : -ENOMEM;
        if (r < 0)
                goto out;
        d9_enc_set_output(enc, buf, sizeof(buf), append_fd_write, &fd);
        r = d9_enc_new_stream(enc);
        if (!r)
                r = d9_enc_intern_string(enc, "", 0, &empty);
        if (!r)
                r = append_mappings(enc, sym);
        for (size_t i = 0; i < n && !r; i++) {
                uint64_t size = 0;
                const char *name = symbolizer_lookup(sym, addrs[i], &size);
                char hex[320];
                uint32_t atom;

                bool anon = !name && symbolizer_in_anonymous_code(sym, addrs[i]);

                if (anon && jit)
                        name = jit_map_lookup(jit, addrs[i]);
                if (!name) {
                        /* In a mapping: a name d9ctl symbolize can replace. */
                        if (addrs[i] >= 0xffff800000000000ull || !symbolizer_unnamed(sym, addrs[i], hex, sizeof(hex)))
                                snprintf(hex, sizeof(hex), "%s 0x%llx", addrs[i] >= 0xffff800000000000ull ? "[kernel]"
                                         : anon ? "[anonymous code]" : "[symbolize-failed]",
                                         (unsigned long long)addrs[i]);
                        name = hex;
                } else {
                        job->symbols++;
                }
                r = d9_enc_intern_string(enc, name, strlen(name), &atom);
                if (!r)
                        r = d9_enc_symbol_entry(enc, 0, addrs[i], size, atom, 0, empty, 0);
        }
        if (!r)
                r = d9_enc_flush(enc);
out:
        d9_enc_free(enc);
        symbolizer_free(sym);
        jit_map_free(jit);
        return r;
}

/* Labels of a stripped build (and frames the first pass left unnamed)
 * named the way d9ctl symbolize does, now that the debug lookups (debug
 * directories, debuginfod) may have found what the planner could not:
 * the .active file is rewritten through a temporary file beside it. */
static int rename_labels(struct seal_job *job)
{
        char tmp[4200];
        uint8_t *raw = NULL;
        size_t len = 0;
        struct resym_stats st;
        const char *why;
        int r = d9_read_trace_file(job->active, &raw, &len, NULL);

        if (r < 0)
                return r;
        snprintf(tmp, sizeof(tmp), "%s.names", job->active);
        unlink(tmp);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
                free(raw);
                return -errno;
        }
        r = resymbolize(raw, len, append_fd_write, &fd, &st, &why);
        free(raw);
        struct stat written;
        /* Never replace recorded data by less than a stream header. */
        if (r == 0 && st.frames_named + st.labels_named && fstat(fd, &written) == 0 && written.st_size >= 5) {
                r = fsync(fd) < 0 || rename(tmp, job->active) < 0 ? -errno : 0;
                if (!r)
                        log_info("%s: named %llu task labels and %llu frames from debug files found at seal time",
                                 job->active, (unsigned long long)st.labels_named,
                                 (unsigned long long)st.frames_named);
        }
        if (r == 0 && st.missing[0])
                log_info("%s: no debug file for build-id %s%s%s", job->active, st.missing,
                         *debuginfo_failure_of(st.missing) ? "; debuginfod's answer: " : "",
                         debuginfo_failure_of(st.missing));
        unlink(tmp);
        return r;
}

static int symbolize_segment(struct seal_job *job)
{
        struct addr_set set = { 0 };
        struct d9_dec_opts opts = { .strict = false, .on_event = collect_addrs, .ctx = &set };
        struct d9_dec_result res;
        uint8_t *raw = NULL;
        size_t len = 0;
        int r = d9_read_trace_file(job->active, &raw, &len, NULL);

        if (r < 0)
                return r;
        r = d9_decode(raw, len, &opts, &res);
        free(raw);
        job->start_realtime_ns = set.first_realtime_ns;
        if (r == 0)
                job->span = set.span;
        if (r == 0 && set.n) {
                size_t u = 0;
                qsort(set.v, set.n, 8, u64_cmp);
                for (size_t i = 0; i < set.n; i++)
                        if (!u || set.v[u - 1] != set.v[i])
                                set.v[u++] = set.v[i];
                r = append_symbols(job, set.v, u);
        }
        free(set.v);
        /* Decoding the segment again is only worth it when the
         * executable's debug file is there now (a stripped build without
         * one would pay a decode per segment for nothing). */
        char *dbg = r == 0 && set.unnamed_labels && set.label_build_id[0] ?
                    uprobes_debug_file_by_build_id(set.label_build_id, "") : NULL;
        if (r == 0 && set.unnamed_labels && (dbg || !set.label_build_id[0]))
                r = rename_labels(job);
        free(dbg);
        return r;
}

static int fsync_dir_of(const char *path)
{
        _cleanup_free_ char *dir = strdup(path);
        char *slash = dir ? strrchr(dir, '/') : NULL;

        if (!slash)
                return -EINVAL;
        *slash = 0;
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 || fsync(fd) < 0 ? -errno : 0;
}

/* The span the listing reads from the first bytes (segment_span.c). A
 * segment of an older d9d has no span event: it is listed by decoding. */
static void fill_span(const struct seal_job *job)
{
        _cleanup_close_ int fd = open(job->active, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        int r = fd < 0 ? -errno : d9_segment_span_patch(fd, &job->span);

        if (r < 0 && r != -ENOENT)
                log_warn("%s: span not written at its start (listings decode it instead): %s", job->active,
                         strerror(-r));
}

int seal_segment(struct seal_job *job)
{
        char tmp[4200];
        struct stat st;
        int r;

        r = symbolize_segment(job);
        if (r < 0)
                log_warn("%s: symbols not appended: %s", job->active, strerror(-r));
        if (job->span.events)
                fill_span(job);
        r = d9d_segment_sealed_path(job->active, d9d_compression_suffix(job->compression),
                                job->sealed, sizeof(job->sealed));
        if (r < 0)
                return r;
        if (job->compression == D9_COMPRESS_NONE) {
                _cleanup_close_ int fd = open(job->active, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || fsync(fd) < 0)
                        return -errno;
                d9d_trace_access_grant(fd, job->reader_uid, false, false);
                if (rename(job->active, job->sealed) < 0)
                        return -errno;
        } else {
                snprintf(tmp, sizeof(tmp), "%s.tmp", job->sealed);
                /* A stale tmp of a crash is ours to replace; the compressor
                 * then creates it O_EXCL|O_NOFOLLOW, never following a link. */
                unlink(tmp);
                r = d9_compress_file(job->active, tmp, job->compression, 0);
                if (r < 0) {
                        unlink(tmp);
                        return r;
                }
                _cleanup_close_ int fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0)
                        d9d_trace_access_grant(fd, job->reader_uid, false, false);
                if (rename(tmp, job->sealed) < 0)
                        return -errno;
                unlink(job->active);
        }
        r = fsync_dir_of(job->sealed);
        if (!stat(job->sealed, &st))
                job->bytes = (uint64_t)st.st_size;
        return r;
}

static void *sealer_main(void *arg)
{
        struct sealer *s = arg;

        /* Sealing may wait for a debuginfod download (bounded per file);
         * the drain loop never does. */
        debuginfo_allow_network(true);
        pthread_mutex_lock(&s->lock);
        for (;;) {
                while (!s->todo && !s->stop)
                        pthread_cond_wait(&s->cond, &s->lock);
                if (!s->todo)
                        break;
                struct seal_job *job = s->todo;
                s->todo = job->next;
                if (!s->todo)
                        s->todo_tail = &s->todo;
                pthread_mutex_unlock(&s->lock);

                job->error = seal_segment(job);
                if (job->error)
                        log_error("sealing %s failed: %s", job->active, strerror(-job->error));
                else
                        log_info("sealed %s (%llu bytes, %llu symbols)", job->sealed,
                                 (unsigned long long)job->bytes, (unsigned long long)job->symbols);
                if (!job->error && s->shipper)
                        ship_sealed(s->shipper, job);
                struct budget_result br = { 0 };
                if (s->d->cfg.disk_budget_bytes)
                        seal_budget_enforce(s->d->traces_dir, s->d->cfg.disk_budget_bytes, &br);

                pthread_mutex_lock(&s->lock);
                s->st.queued--;
                job->error ? s->st.failed++ : s->st.sealed++;
                s->st.evicted += br.evicted;
                s->st.evicted_bytes += br.evicted_bytes;
                job->next = s->done;
                s->done = job;
                uint64_t one = 1;
                (void)!write(s->w.fd, &one, sizeof(one));
        }
        pthread_mutex_unlock(&s->lock);
        return NULL;
}

static void sealer_on_event(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        uint64_t n;

        (void)!read(w->fd, &n, sizeof(n));
        /* session.c owns what a finished job means for its session. */
        sealer_collect(d->sealer, d->sealer->on_done);
}

int sealer_start(struct d9d *d, void (*on_done)(struct d9d *d, struct seal_job *job), struct sealer **out)
{
        struct sealer *s = calloc(1, sizeof(*s));
        int r;

        if (!s)
                return -ENOMEM;
        s->d = d;
        s->on_done = on_done;
        s->todo_tail = &s->todo;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        s->w.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        s->w.fn = sealer_on_event;
        if (s->w.fd < 0 || (r = d9d_watch_add(d, &s->w, EPOLLIN)) < 0 ||
            (r = -pthread_create(&s->thread, NULL, sealer_main, s)) < 0) {
                r = -errno;
                if (s->w.fd >= 0)
                        close(s->w.fd);
                free(s);
                return r ? r : -EIO;
        }
        pthread_setname_np(s->thread, "d9d-sealer");
        *out = s;
        return 0;
}

void sealer_submit(struct sealer *s, struct seal_job *job)
{
        job->next = NULL;
        pthread_mutex_lock(&s->lock);
        *s->todo_tail = job;
        s->todo_tail = &job->next;
        s->st.queued++;
        pthread_cond_signal(&s->cond);
        pthread_mutex_unlock(&s->lock);
}

static struct seal_job *seal_jobs_reverse(struct seal_job *list)
{
        struct seal_job *rev = NULL;

        while (list) {
                struct seal_job *next = list->next;
                list->next = rev;
                rev = list;
                list = next;
        }
        return rev;
}

void sealer_collect(struct sealer *s, void (*fn)(struct d9d *d, struct seal_job *job))
{
        struct seal_job *done;

        pthread_mutex_lock(&s->lock);
        done = s->done;
        s->done = NULL;
        pthread_mutex_unlock(&s->lock);
        /* The sealer thread pushes finished jobs on a stack; hand them on in
         * the order they were sealed so `record` lists segments in order. */
        done = seal_jobs_reverse(done);
        while (done) {
                struct seal_job *next = done->next;
                if (fn)
                        fn(s->d, done);
                free(done->maps);
                if (done->root_fd >= 0)
                        close(done->root_fd);
                free(done);
                done = next;
        }
}

void sealer_get_stats(struct sealer *s, struct sealer_stats *st)
{
        pthread_mutex_lock(&s->lock);
        *st = s->st;
        pthread_mutex_unlock(&s->lock);
}

void sealer_stop(struct sealer *s)
{
        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        s->stop = true;
        pthread_cond_signal(&s->cond);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
        sealer_collect(s, NULL);
        d9d_watch_del(s->d, &s->w);
        close(s->w.fd);
        free(s);
}
