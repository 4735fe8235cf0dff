/* unwind_maps.c: what the unwinder needs of a target's address space,
 * gathered off the drain loop (docs/stacks.md, "Modules off the loop").
 *
 * Reading /proc/PID/maps or /proc/PID/mem waits on the target's mmap lock,
 * which the target can hold, and a read of its memory can stop on a page a
 * userfaultfd never fills; opening a file on FUSE waits on whoever serves
 * it. None of that may happen on the loop that drains every target. So the
 * thread that reads a map (the sampler, or the BPF thread at an attach)
 * also opens here the file behind every executable mapping, keeping only
 * files on a local file system, and the unwinder builds its modules on the
 * loop from this text and these descriptors alone. A file that someone
 * other than root can change is copied here into a sealed memfd, once per
 * version of the file (copies, below): the loop then maps what nobody can
 * truncate under it, and never reads a file a user controls. The vDSO is not read
 * from the target either: every 64-bit process of this kernel maps the
 * same image, so ours stands in (a memfd holding a copy of it). */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>


#include "daemon/core/cleanup.h"
#include "daemon/record/unwind.h"
#include "daemon/symbolize/symbolize.h"
#include "uprobes/uprobes.h"

/* Files per map: a target maps a few dozen; the rest are not opened. */
#define FILES_MAX 1024

/* A sealed copy of a file root does not own, shared by every map that
 * names that version of the file. */
struct file_copy {
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime;
        int fd;
        unsigned users;                 /* unwind_file entries holding it */
        struct file_copy *next;
};

static pthread_mutex_t copies_lock = PTHREAD_MUTEX_INITIALIZER;
static struct file_copy *copies;

struct unwind_file {
        char *path;                     /* as the map names it, in the target's root */
        int fd;
        struct file_copy *copy;         /* fd is a descriptor of it, or NULL */
};

/* One executable mapping of the map: [lo, hi). */
struct exec_range {
        uint64_t lo, hi;
};

struct unwind_maps {
        char *text;
        struct unwind_file *files;
        size_t n;
        struct exec_range *exec;        /* in address order, as the map lists them */
        size_t n_exec, cap_exec;
        uint64_t vdso_lo;               /* 0: the map shows none */
        uint64_t modules_sig;           /* FNV-1a of the lines that make modules */
        uint32_t not_local;             /* executable files on other file systems, not opened */
};

/* Whether fd's file lies on a file system the kernel serves from local
 * storage or memory: reads of it cannot wait on another process. */
static bool on_local_fs(int fd)
{
        static const long local[] = { EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC, BTRFS_SUPER_MAGIC, TMPFS_MAGIC,
                                      OVERLAYFS_SUPER_MAGIC, SQUASHFS_MAGIC, EROFS_SUPER_MAGIC_V1 };
        struct statfs fs;

        if (fstatfs(fd, &fs) < 0)
                return false;
        for (size_t i = 0; i < sizeof(local) / sizeof(*local); i++)
                if (fs.f_type == local[i])
                        return true;
        return false;
}

static bool same_version(const struct file_copy *c, const struct stat *st)
{
        return c->dev == st->st_dev && c->ino == st->st_ino && c->size == st->st_size &&
               c->mtime.tv_sec == st->st_mtim.tv_sec && c->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

static struct file_copy *copy_find(const struct stat *st)
{
        for (struct file_copy *c = copies; c; c = c->next)
                if (same_version(c, st)) {
                        c->users++;
                        return c;
                }
        return NULL;
}

/* The shared copy of the file open on fd (taken over), made if new. */
static struct file_copy *copy_get(int fd, const struct stat *st)
{
        struct file_copy *c;
        int mfd;

        pthread_mutex_lock(&copies_lock);
        c = copy_find(st);
        pthread_mutex_unlock(&copies_lock);
        if (c) {
                close(fd);
                return c;
        }
        /* Outside the lock: a copy of a big file takes a while. */
        mfd = d9_target_file_copy(fd);
        close(fd);
        if (mfd < 0)
                return NULL;
        pthread_mutex_lock(&copies_lock);
        c = copy_find(st);
        if (!c && (c = calloc(1, sizeof(*c)))) {
                *c = (struct file_copy){ st->st_dev, st->st_ino, st->st_size, st->st_mtim, mfd, 1, copies };
                copies = c;
                mfd = -1;
        }
        pthread_mutex_unlock(&copies_lock);
        if (mfd >= 0)
                close(mfd);
        return c;
}

static void copy_put(struct file_copy *c)
{
        struct file_copy **p;

        pthread_mutex_lock(&copies_lock);
        if (--c->users == 0) {
                for (p = &copies; *p != c; p = &(*p)->next)
                        ;
                *p = c->next;
        } else {
                c = NULL;
        }
        pthread_mutex_unlock(&copies_lock);
        if (c) {
                close(c->fd);
                free(c);
        }
}

bool unwind_file_only_root_changes(const struct stat *st)
{
        return st->st_uid == 0 && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

static bool known(const struct unwind_maps *m, const char *path)
{
        for (size_t i = 0; i < m->n; i++)
                if (!strcmp(m->files[i].path, path))
                        return true;
        return false;
}

static int add_file(struct unwind_maps *m, int root_fd, const char *path)
{
        struct file_copy *copy = NULL;
        struct stat st;
        int fd;

        if (m->n == FILES_MAX || known(m, path))
                return 0;
        fd = d9_target_file_openat(root_fd, path, true);
        if (fd < 0)
                return 0;       /* gone or not a regular file: no module file */
        if (!on_local_fs(fd)) {
                m->not_local++;
                close(fd);
                return 0;
        }
        if (fstat(fd, &st) < 0) {
                close(fd);
                return 0;
        }
        if (!unwind_file_only_root_changes(&st)) {
                copy = copy_get(fd, &st);
                if (!copy)
                        return 0;       /* changed while copied, or too big */
                fd = fcntl(copy->fd, F_DUPFD_CLOEXEC, 3);
                if (fd < 0) {
                        copy_put(copy);
                        return 0;
                }
        }
        m->files[m->n].path = strdup(path);
        if (!m->files[m->n].path) {
                close(fd);
                if (copy)
                        copy_put(copy);
                return -ENOMEM;
        }
        m->files[m->n].copy = copy;
        m->files[m->n++].fd = fd;
        return 0;
}

static int add_exec(struct unwind_maps *m, uint64_t lo, uint64_t hi)
{
        if (m->n_exec == m->cap_exec) {
                size_t cap = m->cap_exec ? 2 * m->cap_exec : 64;
                struct exec_range *e = realloc(m->exec, cap * sizeof(*e));

                if (!e)
                        return -ENOMEM;
                m->exec = e;
                m->cap_exec = cap;
        }
        m->exec[m->n_exec++] = (struct exec_range){ lo, hi };
        return 0;
}

struct unwind_maps *unwind_maps_open(int proc_fd, const char *text)
{
        struct unwind_maps *m = text ? calloc(1, sizeof(*m)) : NULL;
        _cleanup_close_ int root_fd = -1;
        const char *line, *next;

        if (!m)
                return NULL;
        m->modules_sig = 0xcbf29ce484222325ull;
        m->text = strdup(text);
        m->files = calloc(FILES_MAX, sizeof(*m->files));
        root_fd = openat(proc_fd, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (!m->text || !m->files) {
                unwind_maps_free(m);
                return NULL;
        }
        for (line = m->text; line && *line; line = next) {
                unsigned long long lo, hi;
                char perms[5], path[4096];
                int n = 0;

                next = strchr(line, '\n');
                next = next ? next + 1 : NULL;
                if (sscanf(line, "%llx-%llx %4s %*s %*s %*s %n", &lo, &hi, perms, &n) < 3 || !n)
                        continue;
                /* Every executable range, a JIT's too (unwind_maps_executable). */
                if (perms[2] == 'x' && add_exec(m, lo, hi) < 0) {
                        unwind_maps_free(m);
                        return NULL;
                }
                if (sscanf(line + n, "%4095[^\n]", path) != 1)
                        continue;
                /* What libdwfl makes modules of: every file mapping, and
                 * the vDSO we report (a heap or stack growing is none). */
                if (path[0] == '/' || !strcmp(path, "[vdso]"))
                        for (const char *c = line; c < (next ? next : line + strlen(line)); c++)
                                m->modules_sig = (m->modules_sig ^ (uint8_t)*c) * 0x100000001b3ull;
                if (perms[2] != 'x')
                        continue;
                if (!strcmp(path, "[vdso]"))
                        m->vdso_lo = lo;
                else if (path[0] == '/' && root_fd >= 0 && add_file(m, root_fd, path) < 0) {
                        unwind_maps_free(m);
                        return NULL;
                }
        }
        return m;
}

void unwind_maps_free(struct unwind_maps *m)
{
        if (!m)
                return;
        for (size_t i = 0; i < m->n; i++) {
                free(m->files[i].path);
                close(m->files[i].fd);
                if (m->files[i].copy)
                        copy_put(m->files[i].copy);
        }
        free(m->files);
        free(m->exec);
        free(m->text);
        free(m);
}

int unwind_maps_read(pid_t pid, struct unwind_maps **out)
{
        _cleanup_close_ int proc_fd = -1;
        _cleanup_free_ char *text = NULL;
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d", pid);
        proc_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (proc_fd < 0)
                return -errno;
        snprintf(path, sizeof(path), "/proc/self/fd/%d/maps", proc_fd);
        text = symbolizer_read_proc_text(path);
        if (!text)
                return -EIO;
        *out = unwind_maps_open(proc_fd, text);
        return *out ? 0 : -ENOMEM;
}

const char *unwind_maps_text(const struct unwind_maps *m)
{
        return m->text;
}

bool unwind_maps_same_modules(const struct unwind_maps *a, const struct unwind_maps *b)
{
        return a->modules_sig == b->modules_sig && a->vdso_lo == b->vdso_lo;
}

bool unwind_maps_executable(const struct unwind_maps *m, uint64_t addr)
{
        size_t lo = 0, hi = m->n_exec;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (addr < m->exec[mid].lo)
                        hi = mid;
                else if (addr >= m->exec[mid].hi)
                        lo = mid + 1;
                else
                        return true;
        }
        return false;
}

uint32_t unwind_maps_not_local(const struct unwind_maps *m)
{
        return m->not_local;
}

int unwind_maps_file(const struct unwind_maps *m, const char *path)
{
        for (size_t i = 0; i < m->n; i++)
                if (!strcmp(m->files[i].path, path))
                        return fcntl(m->files[i].fd, F_DUPFD_CLOEXEC, 3);
        return -1;
}

uint64_t unwind_maps_vdso(const struct unwind_maps *m)
{
        return m->vdso_lo;
}

static int vdso_fd = -1;

/* A sealed memfd holding this process's vDSO image. */
static void vdso_copy(void)
{
        size_t size;
        const void *eh = symbolizer_vdso_image(&size);
        int fd;

        if (!eh)
                return;
        fd = memfd_create("d9-vdso", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return;
        if (write(fd, eh, size) != (ssize_t)size || d9_memfd_seal_copy(fd) < 0) {
                close(fd);
                return;
        }
        vdso_fd = fd;
}

int unwind_vdso_file(void)
{
        static pthread_once_t once = PTHREAD_ONCE_INIT;

        pthread_once(&once, vdso_copy);
        return vdso_fd < 0 ? -1 : fcntl(vdso_fd, F_DUPFD_CLOEXEC, 3);
}
