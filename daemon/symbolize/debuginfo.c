/* debuginfo.c: see debuginfo.h. A download is cut off by a progress
 * callback at the deadline (libdebuginfod's own DEBUGINFOD_TIMEOUT only
 * counts inactivity). A file the servers said they do not have is not asked
 * for again for ten minutes (a sealer naming hundreds of frames of one
 * unknown library must not wait hundreds of times); a failed request (no
 * answer, timeout, server error) only for thirty seconds, so a server that
 * was busy or still indexing is asked again by the next segment. */
#include <elfutils/debuginfod.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/symbolize/debuginfo.h"
#include "proto/d9proto.h"
#include "uprobes/uprobes.h"

static struct debuginfo_opts cfg;
static _Thread_local bool network_ok;
static _Thread_local char last_failure[160];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
#define NOT_FOUND_RETRY_MS (10 * 60 * 1000)
#define FAILED_RETRY_MS (30 * 1000)
/* Keyed by build-id and kind: a server may hold a build's debug file but
 * not its executable, and one missing must not hide the other. */
static struct miss {
        char *id;
        bool executable;
        uint64_t retry_at_ms;
        char why[128];                  /* what the last try of it got */
        bool none_had_it;               /* that was "no server has it" */
} *missed;
static size_t n_missed;

static int past_deadline(debuginfod_client *c, long a, long b)
{
        const uint64_t *deadline = debuginfod_get_user_data(c);

        return d9_now_ms() > *deadline;
}

static struct miss *find_miss(const char *id, bool executable)
{
        for (size_t i = 0; i < n_missed; i++)
                if (missed[i].executable == executable && !strcmp(missed[i].id, id))
                        return &missed[i];
        return NULL;
}

static bool was_missed(const char *id, bool executable)
{
        pthread_mutex_lock(&lock);
        struct miss *m = find_miss(id, executable);
        bool seen = m && d9_now_ms() < m->retry_at_ms;
        pthread_mutex_unlock(&lock);
        return seen;
}

/* Remembers the miss (and why, also as this thread's last failure); err
 * -ENOENT: retried only after NOT_FOUND_RETRY_MS. */
static void note_miss(const char *id, bool executable, int err, const char *why, bool none_had_it)
{
        uint64_t retry_at = d9_now_ms() + (err == -ENOENT ? NOT_FOUND_RETRY_MS : FAILED_RETRY_MS);

        snprintf(last_failure, sizeof(last_failure), "%s %s: %s", executable ? "executable" : "debug file", id, why);
        pthread_mutex_lock(&lock);
        struct miss *m = find_miss(id, executable);
        if (!m) {
                struct miss *more = n_missed < 4096 ? realloc(missed, (n_missed + 1) * sizeof(*more)) : NULL;
                if (more) {
                        missed = more;
                        if ((missed[n_missed].id = strdup(id))) {
                                m = &missed[n_missed++];
                                m->executable = executable;
                        }
                }
        }
        if (m) {
                m->retry_at_ms = retry_at;
                m->none_had_it = none_had_it;
                snprintf(m->why, sizeof(m->why), "%s", why);
        }
        pthread_mutex_unlock(&lock);
}

/* Whether fd (a downloaded debug file) has a symbol table. A stripped Rust
 * executable has a .debug_gdb_scripts section, which debuginfod takes for
 * debug info: a server holding both answers with the newer file, which may
 * be the executable, and nothing would be named from it, unsaid. */
static bool has_symtab(int fd)
{
        Elf *e;
        Elf_Scn *scn = NULL;
        GElf_Shdr sh;
        bool found = false;

        elf_version(EV_CURRENT);
        e = elf_begin(fd, ELF_C_READ, NULL);
        while (e && !found && (scn = elf_nextscn(e, scn)))
                found = gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB && sh.sh_size > 0;
        if (e)
                elf_end(e);
        return found;
}

static char *fetch(const char *id, bool executable)
{
        const char *urls = getenv("DEBUGINFOD_URLS");
        debuginfod_client *c;
        uint64_t deadline;
        char *path = NULL;
        int fd;

        if (!cfg.debuginfod || !network_ok || !urls || !*urls || was_missed(id, executable))
                return NULL;
        c = debuginfod_begin();
        if (!c)
                return NULL;
        deadline = d9_now_ms() + (cfg.timeout_ms ? cfg.timeout_ms : 10000);
        debuginfod_set_user_data(c, &deadline);
        debuginfod_set_progressfn(c, past_deadline);
        /* A hex build-id is passed as text with length 0. */
        fd = executable ? debuginfod_find_executable(c, (const unsigned char *)id, 0, &path)
                        : debuginfod_find_debuginfo(c, (const unsigned char *)id, 0, &path);
        debuginfod_end(c);
        if (fd >= 0 && !executable && !has_symtab(fd)) {
                close(fd);
                free(path);
                path = NULL;
                note_miss(id, executable, -ENOENT, "the server's has no symbol table (a stripped executable?)", false);
                return NULL;
        }
        if (fd >= 0) {
                close(fd);
                return path;
        }
        free(path);
        note_miss(id, executable, fd, fd == -ENOENT ? "no server has it" : strerror(-fd), fd == -ENOENT);
        return NULL;
}

static char *fetch_debuginfo(const char *id, void *ctx)
{
        return fetch(id, false);
}

char *debuginfo_fetch_executable(const char *build_id)
{
        return fetch(build_id, true);
}

void debuginfo_setup(const struct debuginfo_opts *opts)
{
        cfg = opts ? *opts : (struct debuginfo_opts){ 0 };
        struct uprobes_debug_lookup l = {
                .dirs = cfg.dirs, .n_dirs = cfg.n_dirs,
                .fetch = cfg.debuginfod ? fetch_debuginfo : NULL,
        };
        uprobes_set_debug_lookup(&l);
}

void debuginfo_allow_network(bool allow)
{
        network_ok = allow;
}

/* The debug-file miss of missing's build-id (missing starts with it);
 * caller holds lock. */
static const struct miss *debug_miss_of(const char *missing)
{
        size_t n = strcspn(missing, " ");

        for (size_t i = 0; i < n_missed; i++)
                if (!missed[i].executable && strlen(missed[i].id) == n && !strncmp(missed[i].id, missing, n))
                        return &missed[i];
        return NULL;
}

enum debuginfo_answer debuginfo_answer_kind(const char *missing)
{
        pthread_mutex_lock(&lock);
        const struct miss *m = debug_miss_of(missing);
        enum debuginfo_answer kind = !m ? DEBUGINFO_NOT_ASKED : m->none_had_it ? DEBUGINFO_NONE_HAD_IT
                                                                              : DEBUGINFO_OTHER;
        pthread_mutex_unlock(&lock);
        return kind;
}

const char *debuginfo_failure_of(const char *missing)
{
        static _Thread_local char out[sizeof(last_failure)];

        pthread_mutex_lock(&lock);
        const struct miss *m = debug_miss_of(missing);
        if (m)
                snprintf(out, sizeof(out), "debug file %s: %s", m->id, m->why);
        pthread_mutex_unlock(&lock);
        return m ? out : last_failure;
}

const char *debuginfo_last_failure(void)
{
        return last_failure;
}
