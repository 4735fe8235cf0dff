/* trace_access: who may read what d9d writes, and where it may write.
 *
 * Traces are private to the uid that recorded them: files 0600 and
 * directories 0700/0711 owned by d9d, plus a POSIX ACL entry for the
 * recording uid (when it is not root or d9d itself) and one for the trace
 * readers group (config trace_group, default "d9d-traces" if it exists).
 * The socket group (d9d) gets nothing: being allowed to attach is not being
 * allowed to read other users' traces. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

/* Resolve the readers group (name may be "" for none). Returns 0, or
 * -ENOENT if there is no such group (then there are no readers but root). */
int d9d_trace_access_init(const char *group);
/* Mode and ACL of an open file or directory d9d created: readable (dirs:
 * searchable) by reader (0 = nobody but d9d and root) and the readers
 * group. list: a directory whose names may be listed (session dirs) rather
 * than only traversed (the folders above them). */
int d9d_trace_access_grant(int fd, uid_t reader, bool dir, bool list);
/* The state directory (created if missing) must be a real directory owned
 * by us or root, writable by nobody else: files d9d creates under it by path
 * can then not be redirected by a symlink someone planted. Returns 0 or a
 * negative errno with *why a one-line reason. */
int d9d_trace_dir_verify(const char *path, const char **why);
