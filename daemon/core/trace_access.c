/* trace_access.c: see trace_access.h. The ACL is written as the raw
 * system.posix_acl_access xattr (the kernel's documented format), so no
 * libacl is needed; the owner of a file may set it without capabilities. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "daemon/core/cleanup.h"
#include "daemon/core/log.h"
#include "daemon/core/trace_access.h"

#define ACL_VERSION 2
enum { TAG_USER_OBJ = 0x01, TAG_USER = 0x02, TAG_GROUP_OBJ = 0x04, TAG_GROUP = 0x08,
       TAG_MASK = 0x10, TAG_OTHER = 0x20 };

struct acl_entry {
        uint16_t tag, perm;
        uint32_t id;
};

static gid_t readers_gid = (gid_t)-1;

int d9d_trace_access_init(const char *group)
{
        struct group *g;

        readers_gid = (gid_t)-1;
        if (!group || !*group)
                return 0;
        g = getgrnam(group);
        if (g) {
                readers_gid = g->gr_gid;
                return 0;
        }
        return -ENOENT;
}

int d9d_trace_access_grant(int fd, uid_t reader, bool dir, bool list)
{
        /* Entries sorted by tag, then id, as the kernel requires. */
        struct {
                uint32_t version;
                struct acl_entry e[6];
        } __attribute__((packed)) acl = { .version = ACL_VERSION };
        uint16_t rd = dir ? (list ? 5 : 1) : 4;
        size_t n = 0;
        bool any = false;

        if (fchmod(fd, dir ? (list ? 0700 : 0711) : 0600) < 0)
                return -errno;
        acl.e[n++] = (struct acl_entry){ TAG_USER_OBJ, dir ? 7 : 6, (uint32_t)-1 };
        if (reader != 0 && reader != geteuid()) {
                acl.e[n++] = (struct acl_entry){ TAG_USER, rd, reader };
                any = true;
        }
        /* A traverse-only folder lets its owning group through as it lets
         * others: ACL checks stop at the first class that matches, so a
         * member of d9d's own group (every d9ctl user) would otherwise be
         * refused the x that "other" gets, and could not reach even the
         * traces recorded under its own uid. */
        acl.e[n++] = (struct acl_entry){ TAG_GROUP_OBJ, dir && !list ? 1 : 0, (uint32_t)-1 };
        if (readers_gid != (gid_t)-1) {
                acl.e[n++] = (struct acl_entry){ TAG_GROUP, dir ? 5 : 4, readers_gid };
                any = true;
        }
        if (!any)
                return 0;
        acl.e[n++] = (struct acl_entry){ TAG_MASK, dir ? 5 : 4, (uint32_t)-1 };
        acl.e[n++] = (struct acl_entry){ TAG_OTHER, dir && !list ? 1 : 0, (uint32_t)-1 };
        if (fsetxattr(fd, "system.posix_acl_access", &acl, sizeof(uint32_t) + n * sizeof(acl.e[0]), 0) < 0) {
                static bool warned;
                int r = -errno;

                if (!warned) {
                        warned = true;
                        log_warn("cannot set ACLs on traces (%s): they stay readable by d9d and root only",
                                 strerror(-r));
                }
                return r;
        }
        return 0;
}

int d9d_trace_dir_verify(const char *path, const char **why)
{
        _cleanup_close_ int fd = -1;
        struct stat st;

        if (mkdir(path, 0750) < 0 && errno != EEXIST) {
                *why = "cannot be created";
                return -errno;
        }
        fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                *why = errno == ELOOP || errno == ENOTDIR ? "is a symlink or not a directory" : "cannot be opened";
                return -errno;
        }
        if (fstat(fd, &st) < 0) {
                *why = "cannot be inspected";
                return -errno;
        }
        if (st.st_uid != geteuid() && st.st_uid != 0) {
                *why = "is owned by another user (it could plant symlinks in it)";
                return -EPERM;
        }
        if (st.st_mode & 0022) {
                *why = "is writable by group or others (they could plant symlinks in it)";
                return -EPERM;
        }
        return 0;
}
