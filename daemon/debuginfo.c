/* debuginfo.c: see debuginfo.h. A download is cut off by a progress
 * callback at the deadline (libdebuginfod's own DEBUGINFOD_TIMEOUT only
 * counts inactivity), and a build-id the servers did not have is not asked
 * for again for ten minutes: a sealer naming hundreds of frames of one
 * unknown library must not wait hundreds of times. */
#include <elfutils/debuginfod.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "debuginfo.h"
#include "uprobes/uprobes.h"

static struct debuginfo_opts cfg;
static _Thread_local bool network_ok;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Build-ids no server had, and when: asked again after MISS_RETRY_MS (a
 * debug file may be uploaded later), not for every segment before that. */
#define MISS_RETRY_MS (10 * 60 * 1000)
static struct miss {
        char *id;
        uint64_t at_ms;
} *missed;
static size_t n_missed;

static uint64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int past_deadline(debuginfod_client *c, long a, long b)
{
        const uint64_t *deadline = debuginfod_get_user_data(c);

        return now_ms() > *deadline;
}

static bool was_missed(const char *id)
{
        bool seen = false;

        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < n_missed && !seen; i++)
                seen = !strcmp(missed[i].id, id) && now_ms() - missed[i].at_ms < MISS_RETRY_MS;
        pthread_mutex_unlock(&lock);
        return seen;
}

static void note_result(const char *id, bool ok)
{
        pthread_mutex_lock(&lock);
        if (!ok) {
                size_t i = 0;
                while (i < n_missed && strcmp(missed[i].id, id))
                        i++;
                if (i < n_missed) {
                        missed[i].at_ms = now_ms();
                } else {
                        struct miss *more = n_missed < 4096 ? realloc(missed, (n_missed + 1) * sizeof(*more)) : NULL;
                        if (more) {
                                missed = more;
                                if ((missed[n_missed].id = strdup(id)))
                                        missed[n_missed++].at_ms = now_ms();
                        }
                }
        }
        pthread_mutex_unlock(&lock);
}

static char *fetch(const char *id, bool executable)
{
        const char *urls = getenv("DEBUGINFOD_URLS");
        debuginfod_client *c;
        uint64_t deadline;
        char *path = NULL;
        int fd;

        if (!cfg.debuginfod || !network_ok || !urls || !*urls || was_missed(id))
                return NULL;
        c = debuginfod_begin();
        if (!c)
                return NULL;
        deadline = now_ms() + (cfg.timeout_ms ? cfg.timeout_ms : 10000);
        debuginfod_set_user_data(c, &deadline);
        debuginfod_set_progressfn(c, past_deadline);
        /* A hex build-id is passed as text with length 0. */
        fd = executable ? debuginfod_find_executable(c, (const unsigned char *)id, 0, &path)
                        : debuginfod_find_debuginfo(c, (const unsigned char *)id, 0, &path);
        debuginfod_end(c);
        if (fd >= 0)
                close(fd);
        else {
                free(path);
                path = NULL;
        }
        note_result(id, path != NULL);
        return path;
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
