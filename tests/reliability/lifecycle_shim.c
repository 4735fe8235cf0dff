/* lifecycle_shim: LD_PRELOADed into an unmodified Tokio target so that,
 * while d9d traces it, the process forks and then execs into another
 * program (the target itself has no code that does either).
 *   D9_SHIM_FORK_MS  after this many ms, fork; the child sleeps 200 ms, exits
 *   D9_SHIM_EXEC_MS  after this many ms, exec D9_SHIM_EXEC (argv: the path,
 *                    then D9_SHIM_EXEC_ARG if set) */
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long env_ms(const char *name)
{
        const char *v = getenv(name);

        return v ? atol(v) : -1;
}

static void sleep_ms(long ms)
{
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

        while (nanosleep(&ts, &ts) != 0)
                ;
}

static void *shim_thread(void *arg)
{
        long fork_ms = env_ms("D9_SHIM_FORK_MS"), exec_ms = env_ms("D9_SHIM_EXEC_MS"), slept = 0;
        const char *prog = getenv("D9_SHIM_EXEC"), *parg = getenv("D9_SHIM_EXEC_ARG");

        (void)arg;
        if (fork_ms >= 0) {
                sleep_ms(fork_ms);
                slept = fork_ms;
                pid_t c = fork();
                if (c == 0) {
                        sleep_ms(200);
                        _exit(0);
                }
                if (c > 0)
                        waitpid(c, NULL, 0);
        }
        if (exec_ms >= 0 && prog) {
                if (exec_ms > slept)
                        sleep_ms(exec_ms - slept);
                /* The environment would load us again into the new program. */
                unsetenv("LD_PRELOAD");
                char *argv[] = { (char *)prog, (char *)parg, NULL };
                execv(prog, argv);
                _exit(127);
        }
        return NULL;
}

__attribute__((constructor)) static void shim_start(void)
{
        pthread_t t;

        if (getenv("D9_SHIM_FORK_MS") || getenv("D9_SHIM_EXEC_MS"))
                if (pthread_create(&t, NULL, shim_thread, NULL) == 0)
                        pthread_detach(t);
}
