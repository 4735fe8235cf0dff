/* unwind: user stacks without frame pointers, in d9d.
 *
 * BPF (bpf/d9_stack.bpf.h) hands us a D9_REC_STACK: the thread's user
 * registers, a copy of the top of its user stack and its kernel frames.
 * We unwind the user part through .eh_frame/.debug_frame with elfutils'
 * libdwfl, as `perf --call-graph dwarf` does, reading stack memory from
 * the copy. One unwinder per target caches the Dwfl (modules and their CFI)
 * across samples. Work is bounded per sample (max_frames) and per time
 * window (budget): over budget, stacks are dropped and counted, never
 * queued, so the drain loop cannot fall behind because of unwinding.
 * Functions return 0 / a count, or a negative errno. */
#pragma once

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct d9_rec_stack;
struct unwinder;
struct unwind_maps;
struct stat;

struct unwind_opts {
        uint32_t max_frames;            /* user frames per stack; 0: 64 */
        uint32_t budget_us;             /* unwind CPU time (d9d thread) per window; 0: 20000 */
        uint32_t window_ms;             /* of the records' time; 0: 100 (so 20 % of a
                                         * core by default, held records included) */
        const char *debug_file;         /* separate debug file for the main
                                         * executable (stripped binaries), or NULL:
                                         * build-id / .gnu_debuglink lookup */
        bool hide_kernel;               /* leave kernel frames out (kptr_restrict rules) */
        uint32_t copy_bytes;            /* user stack bytes BPF was asked to copy
                                         * (d9_stack_cfg.user_bytes); 0: unknown,
                                         * no stack counts as cut */
        /* A pc lies outside every module and no newer map was handed in:
         * the owner reads one off this thread and hands it in
         * (unwinder_take_maps). At most every 50 ms; NULL: never asked. */
        void (*want_maps)(void *ctx);
        void *want_ctx;
};

/* Addresses from here up are the kernel's. */
#define UNWIND_KERNEL_MIN 0xffff800000000000ull

struct unwind_stats {
        uint64_t stacks;                /* records unwound */
        uint64_t frames;                /* user frames produced */
        uint64_t over_budget;           /* records dropped: budget used up */
        uint64_t truncated;             /* stopped at max_frames */
        uint64_t cut;                   /* stopped where the full copy ended: the
                                         * callers are deeper than copy_bytes */
        uint64_t unread;                /* stopped at stack pages not in memory */
        uint64_t ns;                    /* time spent unwinding */
        uint64_t reports;               /* module sets built from a map handed in */
        uint64_t maps_asked;            /* want_maps calls */
        uint64_t maps_stale;            /* leaves in a module where its map showed
                                         * no executable mapping: a map read while
                                         * ld.so was still mapping the file */
        uint64_t outside;               /* callers outside every module, dropped */
        uint64_t steps[4];              /* steps past frames without CFI, by enum
                                         * unw_step_kind (daemon/record/unwind_step.h):
                                         * [1] frameless leaf, [2] frame pointer, [3] scan */
        uint64_t trap_sites;            /* samples in a uprobe trap, unwound from its site */
};

/* The unwinder reads nothing itself (docs/stacks.md, "Modules off the
 * loop"): it builds its modules from the maps handed in, and reads memory
 * only from the stack copy and the module files. */
int unwinder_new(pid_t pid, const struct unwind_opts *opts, struct unwinder **out);
void unwinder_free(struct unwinder *u);
/* For tools and tests, which may wait on the target: an unwinder that reads
 * the target's map itself (unwind_maps_read), now and whenever it wants one. */
int unwinder_new_reading(pid_t pid, const struct unwind_opts *opts, struct unwinder **out);
/* A newer map of the target (taken over; NULL is ignored): the modules are
 * built again from it when a pc falls outside them, or at the first stack. */
void unwinder_take_maps(struct unwinder *u, struct unwind_maps *m);

/* A map's text and the files behind its executable mappings, opened
 * (daemon/record/unwind_maps.c). Made where reads may wait: never on the
 * drain loop. unwind_maps_open copies text; proc_fd is the /proc/PID
 * directory. NULL: out of memory. */
struct unwind_maps *unwind_maps_open(int proc_fd, const char *text);
/* The same from /proc/PID/maps, for tools and tests. */
int unwind_maps_read(pid_t pid, struct unwind_maps **out);
void unwind_maps_free(struct unwind_maps *m);
const char *unwind_maps_text(const struct unwind_maps *m);
/* Whether both maps give the same modules at the same addresses. */
bool unwind_maps_same_modules(const struct unwind_maps *a, const struct unwind_maps *b);
/* A new descriptor of the file the map names at path, or -1. */
int unwind_maps_file(const struct unwind_maps *m, const char *path);
/* Whether the map shows an executable mapping at addr. */
bool unwind_maps_executable(const struct unwind_maps *m, uint64_t addr);
/* Where the vDSO is mapped, or 0. */
uint64_t unwind_maps_vdso(const struct unwind_maps *m);
/* Executable files the map names on a non-local file system, not opened. */
uint32_t unwind_maps_not_local(const struct unwind_maps *m);
/* Whether only root can change the file: owned by root, writable by no
 * group or other (with ACLs, the group bits are their mask). */
bool unwind_file_only_root_changes(const struct stat *st);
/* A new descriptor of a copy of this kernel's vDSO image, or -1. */
int unwind_vdso_file(void);

/* Frames of one STACK record (size bytes as read from the ring), leaf
 * first: kernel frames, then user frames. A caller's frame is given as
 * its return address - 1 (inside the call), the leaf as its exact pc.
 * Returns the number of frames written to out (<= cap), -EBUSY if the
 * budget is used up (counted in over_budget), -ENOENT if no map came yet
 * to unwind it with, -EBADMSG for a short record. */
int unwinder_stack(struct unwinder *u, const struct d9_rec_stack *rec, size_t size,
                   uint64_t *out, size_t cap, uint32_t *n_kern);

/* d9d's uprobe sites in the module whose build-id is build_id (hex, kept
 * by the caller; NULL: any module): link-time addresses, copied. A sample
 * taken in one's trap is unwound from the site, not from one byte past it.
 * 0 or -ENOMEM (the sites stay as they were). */
int unwinder_set_trap_sites(struct unwinder *u, const char *build_id, const uint64_t *sites, size_t n);

/* A user address as a link-time address of the module it lies in, if that
 * module's build-id is build_id (hex; NULL: any module). 0, or -ENOENT. */
int unwinder_link_vaddr(struct unwinder *u, uint64_t addr, const char *build_id, uint64_t *vaddr);

/* Where the function holding user address addr starts, as the target
 * runs it: the .eh_frame_hdr entry at or below it whose FDE covers it.
 * 0, or -ENOENT (no module, no table, no FDE there). */
int unwinder_fn_start(struct unwinder *u, uint64_t addr, uint64_t *start);

void unwinder_get_stats(const struct unwinder *u, struct unwind_stats *st);

/* Whether the last unwinder_stack stopped because the walk needed stack
 * beyond a full copy (counted in stats.cut): the frames are the stack's
 * innermost part only, its outermost frames are not in the record. */
bool unwinder_last_cut(const struct unwinder *u);
/* Whether the last unwinder_stack stopped at a word in the record's
 * pages not in memory (unread_at; counted in stats.unread), not cut. */
bool unwinder_last_unread(const struct unwinder *u);
/* Whether the last unwinder_stack stopped at max_frames (counted in
 * stats.truncated): its outermost frames were not walked. */
bool unwinder_last_capped(const struct unwinder *u);

/* Name of a user address from the target's symbols (its debug file if one
 * is found or given), demangled as the sealer does (elfsym.h); NULL if
 * unknown. The string lives until the next call. For tests and tools: the
 * sealer names trace addresses with daemon/symbolize/symbolize.c. */
const char *unwinder_addr_name(struct unwinder *u, uint64_t addr);

/* 1 if the target's executable has CFI (.eh_frame_hdr), 0 if it has none
 * (built with frame pointers, .eh_frame stripped: d9d then has BPF follow
 * rbp past the stack copy, D9_STACK_FP_TAIL), or a negative errno. */
int unwind_exe_has_cfi(pid_t pid);
/* The same for the ELF file open on fd. */
int unwind_file_has_cfi(int fd);
