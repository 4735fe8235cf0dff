/* proto/io.c: the one write-all / read-full / bounded read-all. Each check
 * sets up what breaks a naive loop: a pipe that takes less than asked, a
 * signal landing in blocked reads and writes (no SA_RESTART), a peer that
 * closed, a file that ends early, a pipe longer than the limit. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "d9proto.h"
#include "tests/tap.h"

#define BIG (1u << 20) /* 16 times what a pipe holds */

static volatile sig_atomic_t ticks, sigpipes;

static void on_tick(int sig)
{
        (void)sig;
        ticks++;
}

static void on_sigpipe(int sig)
{
        (void)sig;
        sigpipes++;
}

/* Every 2 ms without SA_RESTART, so blocked reads and writes see EINTR. */
static void interrupt_often(bool on)
{
        struct sigaction sa = { .sa_handler = on_tick };
        struct itimerval it = { { 0, on ? 2000 : 0 }, { 0, on ? 2000 : 0 } };

        sigaction(SIGALRM, &sa, NULL);
        setitimer(ITIMER_REAL, &it, NULL);
}

static uint8_t *pattern(size_t len)
{
        uint8_t *p = malloc(len);

        for (size_t i = 0; p && i < len; i++)
                p[i] = (uint8_t)(i * 7 + i / 251);
        return p;
}

struct pipe_end {
        int fd;
        const uint8_t *data;
        size_t len;
        int r;
};

/* The writing end: late, so the reader blocks first. */
static void *write_late(void *arg)
{
        struct pipe_end *w = arg;

        usleep(20000);
        w->r = d9_write_all(w->fd, w->data, w->len);
        close(w->fd);
        return NULL;
}

static int temp_file(const void *data, size_t len)
{
        char path[] = "/tmp/d9-test-io.XXXXXX";
        int fd = mkstemp(path);

        if (fd < 0)
                bail("mkstemp: %s", strerror(errno));
        unlink(path);
        if (d9_write_all(fd, data, len) < 0 || lseek(fd, 0, SEEK_SET) != 0)
                bail("writing %s", path);
        return fd;
}

static void test_pipe_interrupted(void)
{
        int p[2];
        uint8_t *data = pattern(BIG), *back = malloc(BIG + 1);
        struct pipe_end w;
        pthread_t t;

        if (!data || !back || pipe(p) < 0)
                bail("setup");
        w = (struct pipe_end){ p[1], data, BIG, -1 };
        ticks = 0;
        interrupt_often(true);
        pthread_create(&t, NULL, write_late, &w);
        ssize_t got = d9_read_full(p[0], back, BIG + 1, -1);
        close(p[0]); /* a reader that gave up must not leave the writer blocked */
        pthread_join(t, NULL);
        interrupt_often(false);
        ok(w.r == 0, "d9_write_all: 1 MiB through a 64 KiB pipe, %d signals meanwhile", (int)ticks);
        ok(got == BIG && !memcmp(back, data, BIG), "d9_read_full: all of it, in order, then end of file (%zd)", got);
        ok(ticks > 0, "signals did land during the transfer");
        free(data);
        free(back);
}

static void test_closed_peer(void)
{
        int sv[2];
        char byte = 'x';

        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
                bail("socketpair");
        close(sv[1]);
        sigpipes = 0;
        ok(d9_write_all(sv[0], &byte, 1) == -EPIPE && sigpipes == 0,
           "d9_write_all to a closed socket: -EPIPE, no SIGPIPE (%d)", (int)sigpipes);
        close(sv[0]);
}

static void test_read_full_file(void)
{
        uint8_t *data = pattern(10000), buf[4000];
        int fd = temp_file(data, 10000);

        ok(d9_read_full(fd, buf, 4000, 6000) == 4000 && !memcmp(buf, data + 6000, 4000) && lseek(fd, 0, SEEK_CUR) == 0,
           "d9_read_full at an offset: those bytes, the file position untouched");
        ok(d9_read_full(fd, buf, 4000, 8000) == 2000, "d9_read_full past the end: what there is");
        ok(d9_read_full(fd, buf, 4000, -1) == 4000 && !memcmp(buf, data, 4000) && lseek(fd, 0, SEEK_CUR) == 4000,
           "d9_read_full from the position: advances it");
        ok(d9_read_full(-1, buf, 1, -1) == -EBADF, "d9_read_full on a bad fd: -EBADF");
        close(fd);
        free(data);
}

static void test_read_all_bounded(void)
{
        uint8_t *data = pattern(BIG);
        struct d9_buf b = { 0 };
        int fd = temp_file(data, 5000), r;

        r = d9_buf_append(&b, "head", 4);
        if (r == 0)
                r = d9_read_all(fd, &b, 5000);
        ok(r == 0 && b.len == 5004 && !memcmp(b.data + 4, data, 5000) && b.data[b.len] == 0,
           "d9_read_all: a file of exactly the limit, appended and NUL-terminated");
        d9_buf_free(&b);
        lseek(fd, 0, SEEK_SET);
        ok(d9_read_all(fd, &b, 4999) == -EFBIG && b.len <= 5000, "one byte over the limit: -EFBIG (read %zu)", b.len);
        d9_buf_free(&b);
        close(fd);

        /* A pipe has no size to ask: the limit alone stops it. */
        for (int over = 0; over < 2; over++) {
                int p[2];
                pthread_t t;
                struct pipe_end w;

                if (pipe(p) < 0)
                        bail("pipe");
                w = (struct pipe_end){ p[1], data, BIG, -1 };
                pthread_create(&t, NULL, write_late, &w);
                r = d9_read_all(p[0], &b, over ? BIG - 1 : BIG);
                close(p[0]); /* the writer sees EPIPE once we stop */
                pthread_join(t, NULL);
                if (over)
                        ok(r == -EFBIG && b.len == BIG, "a pipe longer than the limit: -EFBIG after limit + 1 bytes");
                else
                        ok(r == 0 && b.len == BIG && !memcmp(b.data, data, BIG), "a 1 MiB pipe within the limit: all of it");
                d9_buf_free(&b);
        }
        free(data);
}

int main(void)
{
        /* Counted, not fatal: a writer whose reader stopped gets EPIPE. */
        signal(SIGPIPE, on_sigpipe);
        test_pipe_interrupted();
        test_closed_peer();
        test_read_full_file();
        test_read_all_bounded();
        return tap_done();
}
