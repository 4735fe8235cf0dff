/* accept_queue: the accept queues of a target's listening TCP sockets,
 * from sock_diag in the target's network namespace, matched to the socket
 * inodes the target holds. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "proto/d9proto.h"

#define ACCEPT_QUEUE_LISTENERS_MAX 256  /* listeners of one netns a dump keeps */
#define ACCEPT_QUEUE_FDS_MAX 65536      /* fds of the target one scan reads */

/* A NETLINK_SOCK_DIAG socket in the network namespace of the process
 * behind pidfd. It enters that namespace and comes back to own_netns_fd
 * (the caller's): call it only on a thread that does nothing else meanwhile.
 * Returns the socket fd or -errno. */
int accept_queue_socket(int pidfd, int own_netns_fd);

struct accept_queue_counts {
        uint64_t listeners_over;        /* listeners past ACCEPT_QUEUE_LISTENERS_MAX */
        uint64_t fds_over;              /* fds past ACCEPT_QUEUE_FDS_MAX, not looked at */
};

/* Up to max of the target's listeners (proc_fd: its /proc/PID directory)
 * into out; *n how many. Returns 0 or -errno. */
int accept_queue_read(int diag_fd, int proc_fd, struct d9_accept_queue *out, size_t max, size_t *n,
                      struct accept_queue_counts *counts);
