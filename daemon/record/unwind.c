/* unwind.c: .eh_frame unwinding of BPF stack snapshots with libdwfl.
 *
 * The Dwfl of a target is built from the last map handed in
 * (unwinder_take_maps: its text and the module files, opened off this
 * thread by unwind_maps.c) and built again when a pc falls outside every
 * known module (an exec, a dlopen, a JIT region) and a newer map came; if
 * none came, the owner is asked for one (want_maps). Its "process" is
 * attached with our own thread callbacks: the single thread is the sample
 * being unwound, its registers are the ones BPF captured, and its memory
 * is the stack copy. Reads outside the copy that look like stack fail (the
 * live stack has moved on since the sample); other reads (rare: CFI
 * expressions reading data, code before a return address) come from the
 * module's file, never from the target's memory: nothing here reads /proc.
 *
 * Memory (docs/stacks.md): a Dwfl is per address space, but the ELF files
 * behind it are not. Targets running the same executable, and every
 * target's libc and ld.so, share one libelf handle per file (elf_shares),
 * so .eh_frame and the section tables are mapped and read once, not once
 * per target. Unwinding never loads DWARF debug info: libdwfl falls back
 * to .debug_frame when .eh_frame has no answer (the outermost frame of
 * every stack), and getting there decompresses all of the debug file's
 * sections (about 1 MiB per target for libc's) to find a table that
 * Rust and Debian binaries do not ship anyway. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <elfutils/libdwfl.h>

#include "bpf/d9_events.h"
#include "daemon/core/cleanup.h"
#include "daemon/record/unwind.h"
#include "daemon/record/unwind_step.h"
#include "uprobes/elfsym/elfsym.h"
#include "uprobes/uprobes.h"
#include "proto/d9proto.h"

/* Thread stacks are at most this big (glibc's default is 8 MiB): a read
 * this close above sp that misses the copy is stale stack, not data. */
#define STACK_SPAN (8ull << 20)

/* One opened ELF file, shared by every unwinder whose target maps it. */
struct elf_share {
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime;
        int fd;
        Elf *elf;                       /* our reference; each module holds another */
        unsigned users;                 /* unwinders holding it */
        struct elf_share *next;
};

/* The 16 code bytes before a candidate return address: the same few
 * hundred return addresses come back in every sample, and each read from
 * the module's file goes through libelf. Direct-mapped, dropped when the
 * modules are reloaded. */
#define CODE_CACHE_LINES 1024
struct code_line {
        uint64_t addr;                  /* 0: empty */
        uint8_t code[16];
};

/* Unwinders live on the drain thread only, so this list needs no lock. */
static struct elf_share *elf_shares;

struct unwinder {
        pid_t pid;
        Dwfl *dwfl;
        /* unwinder_link_vaddr's last module with the asked build-id:
         * [lv_lo, lv_hi) maps to link-time addresses by lv_bias. Every user
         * frame of every stack is looked up (daemon/record/long_poll.c), and
         * a module lookup plus build-id check per frame slowed the drain. */
        uint64_t lv_lo, lv_hi, lv_bias;
        const char *lv_build_id;
        /* d9d's own uprobe sites (unwinder_set_trap_sites). */
        const char *sites_build_id;
        uint64_t *sites;                /* sorted */
        size_t n_sites;
        Dwfl_Callbacks callbacks;
        char *debug_file;
        struct unwind_maps *maps;       /* the one dwfl was built from: its files
                                         * stay open, libdwfl finds them lazily */
        struct unwind_maps *maps_next;  /* a newer one, not built yet */
        void (*want_maps)(void *ctx);
        void *want_ctx;
        uint32_t max_frames;
        uint64_t budget_ns, window_ns, window_start, window_used;
        uint64_t last_want_ns;
        /* The sample being unwound. */
        const struct d9_rec_stack *rec;
        uint64_t *out;
        size_t n_out, cap_out, n_user;
        /* One libdw walk of it: from these registers (the sample's, or
         * those a step without CFI found, whose pc is then a return
         * address), until a frame without CFI, whose registers it leaves
         * in stuck_regs (docs/stacks.md, "Frames without CFI"). */
        uint64_t walk_regs[D9_STACK_NREGS];
        bool walk_from_return, walk_first;
        bool stuck;
        enum unw_cfi stuck_cfi;
        uint64_t stuck_regs[D9_STACK_NREGS];
        char *name;                     /* last unwinder_addr_name result */
        bool unwinding;                 /* inside dwfl_getthread_frames */
        bool hide_kernel;
        uint32_t copy_bytes;
        bool cut;                       /* this stack: a read past a full copy */
        bool unread;                    /* ... or inside its pages not in memory */
        bool capped;                    /* ... or it stopped at max_frames */
        struct code_line *code_cache;   /* code before return addresses (step_read_code) */
        struct elf_share **held;        /* shares this unwinder took a user on */
        size_t n_held;
        struct unwind_stats stats;
};

/* libdwfl's find_debuginfo callback gets no context pointer; every libdwfl
 * call that may reach it is made from this file with `active` set. */
static __thread struct unwinder *active;

static struct elf_share *elf_share_find(const struct stat *st)
{
        for (struct elf_share *e = elf_shares; e; e = e->next)
                if (e->dev == st->st_dev && e->ino == st->st_ino && e->size == st->st_size &&
                    e->mtime.tv_sec == st->st_mtim.tv_sec && e->mtime.tv_nsec == st->st_mtim.tv_nsec)
                        return e;
        return NULL;
}

/* Whether the file can shrink under a mapping of it, which would then
 * fault (SIGBUS) inside libdw. unwind_maps.c hands in files on local file
 * systems that only root can change, and sealed copies of the others, so
 * every file here is mapped: libdw then touches only the pages of
 * .eh_frame it reads (a 300 MB binary has 25 MB of it). The check stays,
 * for a file that got here some other way: read with pread then. */
static bool cannot_shrink(int fd, const struct stat *st)
{
        int seals = fcntl(fd, F_GET_SEALS);

        return (seals >= 0 && (seals & F_SEAL_SHRINK)) || unwind_file_only_root_changes(st);
}

/* The share for the file open on fd, created if new (taking fd), or NULL
 * (fd left to the caller). */
static struct elf_share *elf_share_get(int fd)
{
        struct elf_share *e;
        struct stat st;
        Elf *elf;

        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return NULL;
        e = elf_share_find(&st);
        if (e) {
                close(fd);
                return e;
        }
        elf = elf_begin(fd, cannot_shrink(fd, &st) ? ELF_C_READ_MMAP : ELF_C_READ, NULL);
        if (!elf || elf_kind(elf) != ELF_K_ELF || !(e = calloc(1, sizeof(*e)))) {
                elf_end(elf);
                return NULL;
        }
        *e = (struct elf_share){ st.st_dev, st.st_ino, st.st_size, st.st_mtim, fd, elf, 0, elf_shares };
        elf_shares = e;
        return e;
}

static void elf_share_put(struct elf_share *e)
{
        struct elf_share **p;

        if (e->users && --e->users)
                return;
        for (p = &elf_shares; *p != e; p = &(*p)->next)
                ;
        *p = e->next;
        elf_end(e->elf);
        close(e->fd);
        free(e);
}

/* Take a user on e for u (once per unwinder). */
static int unwinder_hold(struct unwinder *u, struct elf_share *e)
{
        struct elf_share **more;

        for (size_t i = 0; i < u->n_held; i++)
                if (u->held[i] == e)
                        return 0;
        more = realloc(u->held, (u->n_held + 1) * sizeof(*more));
        if (!more)
                return -ENOMEM;
        u->held = more;
        u->held[u->n_held++] = e;
        e->users++;
        return 0;
}

/* A file module of the target: the file the map handed in names at
 * modname, opened off this thread (unwind_maps.c), then the file's shared
 * handle instead of a new one: libdwfl takes a reference (elf_begin with a
 * ref) and drops it in dwfl_end. Other modules have no file: the vDSO is
 * reported with its own (dwfl_load). */
static int find_elf(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                    char **file_name, Elf **elfp)
{
        struct unwinder *u = active;
        int fd = u && u->maps && modname[0] == '/' ? unwind_maps_file(u->maps, modname) : -1;
        struct elf_share *e;

        (void)mod;
        (void)userdata;
        (void)base;
        if (fd < 0)
                return -1;
        *file_name = strdup(modname);
        if (!*file_name) {
                close(fd);
                return -1;
        }
        e = elf_share_get(fd);
        if (!e) {
                /* Not an ELF file (or out of memory): never handed to
                 * libdwfl, which would map it. */
                close(fd);
                return -1;
        }
        if (unwinder_hold(u, e) < 0) {
                if (!e->users)
                        elf_share_put(e);       /* just made: nobody else has it */
                return -1;
        }
        *elfp = elf_begin(-1, ELF_C_READ, e->elf);
        return -1;
}

static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
                          GElf_Addr base, const char *file_name, const char *debuglink_file,
                          GElf_Word debuglink_crc, char **debuginfo_file_name)
{
        struct unwinder *u = active;
        char exe[64], real[4096];
        ssize_t n;

        /* See the top of this file: CFI comes from .eh_frame only. libdwfl
         * remembers the failure for DWARF, not for symbols, so names
         * (unwinder_addr_name) still find the debug file. */
        if (u && u->unwinding)
                return -1;
        snprintf(exe, sizeof(exe), "/proc/%d/exe", u ? u->pid : 0);
        if (u && u->debug_file && file_name && (n = readlink(exe, real, sizeof(real) - 1)) > 0) {
                real[n] = 0;
                if (!strcmp(real, file_name)) {
                        /* libdwfl maps it: a sealed copy cannot shrink. */
                        int fd = d9_target_file_open_copy(u->debug_file);
                        if (fd >= 0) {
                                *debuginfo_file_name = strdup(u->debug_file);
                                return fd;
                        }
                }
        }
        return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name,
                                            debuglink_file, debuglink_crc, debuginfo_file_name);
}

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
        struct unwinder *u = arg;

        (void)dwfl;
        if (*thread_argp || !u->rec)
                return 0;
        *thread_argp = u;
        return (pid_t)u->rec->hdr.tid;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
        struct unwinder *u = arg;

        (void)dwfl;
        *thread_argp = u;
        return u->rec && (pid_t)u->rec->hdr.tid == tid;
}

/* The copied stack: data[] of the record, which a deep copy
 * (D9_SREC_DEEP) makes longer than the struct's array. */
static const uint8_t *rec_user(const struct d9_rec_stack *r)
{
        return (const uint8_t *)r + D9_REC_STACK_FIXED;
}

/* The frame-pointer frames BPF read past the end of the copy. */
static const struct d9_fp_frame *fp_tail(const struct d9_rec_stack *r)
{
        return (const struct d9_fp_frame *)(const void *)(rec_user(r) + ((r->user_len + 7) & ~7u));
}

static bool fp_tail_read(const struct d9_rec_stack *r, uint64_t addr, Dwarf_Word *result)
{
        const struct d9_fp_frame *f = fp_tail(r);

        for (uint32_t i = 0; i < r->n_fp; i++) {
                if (addr == f[i].addr || addr == f[i].addr + 8) {
                        *result = addr == f[i].addr ? f[i].bp : f[i].ra;
                        return true;
                }
        }
        return false;
}

/* Bytes of a module's file where it is mapped at addr (also for a target
 * that is gone: its last stacks are unwound after it exited), from a
 * segment the target cannot write: what the file holds is what the target
 * sees there. libelf keeps each chunk, one per address, until the file is
 * closed. */
static bool file_bytes(struct unwinder *u, uint64_t addr, void *buf, size_t len, bool writable, uint64_t *bias_out)
{
        Dwfl_Module *mod = u->dwfl ? dwfl_addrmodule(u->dwfl, addr) : NULL;
        GElf_Addr bias, vaddr;
        Elf *elf = mod ? dwfl_module_getelf(mod, &bias) : NULL;
        size_t n;

        if (!elf || elf_getphdrnum(elf, &n) != 0)
                return false;
        vaddr = addr - bias;
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;
                Elf_Data *d;

                if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || (!writable && (ph.p_flags & PF_W)) ||
                    vaddr < ph.p_vaddr || vaddr + len > ph.p_vaddr + ph.p_filesz)
                        continue;
                d = elf_getdata_rawchunk(elf, (int64_t)(ph.p_offset + vaddr - ph.p_vaddr), len, ELF_T_BYTE);
                if (!d || d->d_size != len)
                        return false;
                memcpy(buf, d->d_buf, len);
                *bias_out = bias;
                return true;
        }
        return false;
}

/* Bytes of a module's read-only segments, as its file holds them. */
static bool module_bytes(struct unwinder *u, uint64_t addr, void *buf, size_t len)
{
        uint64_t bias;

        return file_bytes(u, addr, buf, len, false, &bias);
}

/* The word just below the sampled sp, for a leaf at `ret` right after
 * `pop %rbp` or `leave`: LLVM's CFI there still says rbp is saved at the
 * CFA less 16, a slot just popped and below the copy, whose value is in
 * rbp now (npm sideseat: 65 of 37,715 stacks ended one caller later,
 * unmarked, the caller's CFA being rbp-based). */
static bool popped_rbp(struct unwinder *u, Dwarf_Word *result)
{
        const struct d9_rec_stack *r = u->rec;
        uint8_t code[2];

        if (u->walk_regs[D9_DW_RIP] != r->regs[D9_DW_RIP] || r->regs[D9_DW_RIP] < 1 ||
            !module_bytes(u, r->regs[D9_DW_RIP] - 1, code, sizeof(code)) ||
            (code[0] != 0x5d && code[0] != 0xc9) || code[1] != 0xc3)
                return false;
        *result = r->regs[D9_DW_RBP];
        return true;
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
        struct unwinder *u = arg;
        const struct d9_rec_stack *r = u->rec;
        uint64_t sp = r->regs[D9_DW_RSP];

        (void)dwfl;
        /* A pending uretprobe's slot: the real return address, not the
         * trampoline the kernel put there. */
        for (uint32_t i = 0; i < r->n_uret && i < D9_STACK_URET_MAX; i++) {
                if (addr == r->uret[i].stack) {
                        *result = r->uret[i].orig_ret;
                        return true;
                }
        }
        /* Pages BPF found not in memory, with the callers' frames above
         * them (a sample in a page fault on the stack): a step that needs
         * a word there cannot be taken, and the stack says so. */
        if (r->unread_len && addr + sizeof(*result) > sp + r->unread_at &&
            addr < sp + r->unread_at + r->unread_len) {
                u->unread = true;
                return false;
        }
        if (addr == sp - sizeof(*result) && popped_rbp(u, result))
                return true;
        if (addr >= sp && addr - sp + sizeof(*result) <= r->user_len) {
                memcpy(result, rec_user(r) + (addr - sp), sizeof(*result));
                return true;
        }
        if (r->n_fp && fp_tail_read(r, addr, result))
                return true;
        if (addr + 4096 >= sp && addr < sp + STACK_SPAN) {
                /* Past a copy that got all it asked for, the stack goes on:
                 * the walk ends here because of the copy, not the stack (a
                 * short copy, or one BPF says ends at the top of the
                 * stack's mapping, stopped at the top of the thread's
                 * stack). */
                if (addr >= sp + r->user_len && u->copy_bytes && r->user_len >= u->copy_bytes &&
                    !(r->flags & D9_SREC_TOP))
                        u->cut = true;
                return false;
        }
        return module_bytes(u, addr, result, sizeof(*result));
}

static bool set_initial_registers(Dwfl_Thread *thread, void *arg)
{
        struct unwinder *u = arg;
        Dwarf_Word regs[D9_STACK_NREGS];

        for (int i = 0; i < D9_STACK_NREGS; i++)
                regs[i] = u->walk_regs[i];
        dwfl_thread_state_register_pc(thread, regs[D9_DW_RIP]);
        return dwfl_thread_state_registers(thread, 0, D9_STACK_NREGS, regs);
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
        .next_thread = next_thread,
        .get_thread = get_thread,
        .memory_read = memory_read,
        .set_initial_registers = set_initial_registers,
};

/* The modules of the map in maps_next, as a new Dwfl attached to our
 * thread callbacks, replacing u->dwfl on success. Never a re-report into
 * the old one: dwfl_attach_state borrows the first module's backend (Ebl),
 * and a re-report that drops that module (the image an exec replaced)
 * would leave the Dwfl using it after it was freed. The ELF files stay
 * open in elf_shares, so this parses the text; libdwfl opens a module's
 * file (find_elf) when a pc first lands in it. */
static int dwfl_load(struct unwinder *u)
{
        struct unwind_maps *next = u->maps_next, *old_maps = u->maps;
        Dwfl *dwfl = dwfl_begin(&u->callbacks);
        Dwfl *old = u->dwfl;
        uint64_t vdso = unwind_maps_vdso(next);
        FILE *text;
        int r, fd;

        u->maps_next = NULL;
        text = fmemopen((void *)unwind_maps_text(next), strlen(unwind_maps_text(next)), "r");
        if (!dwfl || !text) {
                if (dwfl)
                        dwfl_end(dwfl);
                if (text)
                        fclose(text);
                unwind_maps_free(next);
                return -ENOMEM;
        }
        u->dwfl = dwfl;
        u->maps = next;         /* find_elf looks files up here */
        u->lv_hi = 0;           /* the maps may have moved */
        dwfl_report_begin(dwfl);
        r = dwfl_linux_proc_maps_report(dwfl, text);
        fclose(text);
        /* libdwfl reports a vDSO only from the target's auxv and memory. */
        if (r == 0 && vdso && (fd = unwind_vdso_file()) >= 0 &&
            !dwfl_report_elf(dwfl, "[vdso]", "[vdso]", fd, vdso, true))
                close(fd);
        dwfl_report_end(dwfl, NULL, NULL);
        r = r > 0 ? -r : r < 0 ? -EIO : 0;
        if (r == 0 && !dwfl_attach_state(dwfl, NULL, u->pid, &thread_callbacks, u))
                r = -EINVAL;
        u->stats.reports++;
        if (r < 0) {
                dwfl_end(dwfl);
                u->dwfl = old;
                u->maps = old_maps;
                unwind_maps_free(next);
                return r;
        }
        if (old)
                dwfl_end(old);
        unwind_maps_free(old_maps);
        free(u->code_cache);
        u->code_cache = NULL;
        return 0;
}

void unwinder_take_maps(struct unwinder *u, struct unwind_maps *m)
{
        if (!m)
                return;
        unwind_maps_free(u->maps_next);
        u->maps_next = m;
}

static void read_maps_here(void *ctx)
{
        struct unwinder *u = ctx;
        struct unwind_maps *m;

        if (unwind_maps_read(u->pid, &m) == 0)
                unwinder_take_maps(u, m);
}

int unwinder_new_reading(pid_t pid, const struct unwind_opts *opts, struct unwinder **out)
{
        struct unwind_opts o = opts ? *opts : (struct unwind_opts){ 0 };
        int r;

        o.want_maps = NULL;
        r = unwinder_new(pid, &o, out);
        if (r < 0)
                return r;
        (*out)->want_maps = read_maps_here;
        (*out)->want_ctx = *out;
        read_maps_here(*out);
        return 0;
}

int unwinder_new(pid_t pid, const struct unwind_opts *opts, struct unwinder **out)
{
        static const struct unwind_opts none;
        struct unwinder *u = calloc(1, sizeof(*u));

        if (!u)
                return -ENOMEM;
        if (!opts)
                opts = &none;
        u->pid = pid;
        u->max_frames = opts->max_frames ? opts->max_frames : 128;
        u->budget_ns = (opts->budget_us ? opts->budget_us : 20000) * 1000ull;
        u->window_ns = (opts->window_ms ? opts->window_ms : 100) * 1000000ull;
        u->debug_file = opts->debug_file ? strdup(opts->debug_file) : NULL;
        u->hide_kernel = opts->hide_kernel;
        u->copy_bytes = opts->copy_bytes;
        u->want_maps = opts->want_maps;
        u->want_ctx = opts->want_ctx;
        u->callbacks.find_elf = find_elf;
        u->callbacks.find_debuginfo = find_debuginfo;
        if (opts->debug_file && !u->debug_file) {
                unwinder_free(u);
                return -ENOMEM;
        }
        *out = u;
        return 0;
}

void unwinder_free(struct unwinder *u)
{
        if (!u)
                return;
        if (u->dwfl)
                dwfl_end(u->dwfl);
        for (size_t i = 0; i < u->n_held; i++)
                elf_share_put(u->held[i]);
        free(u->held);
        free(u->code_cache);
        free(u->sites);
        unwind_maps_free(u->maps);
        unwind_maps_free(u->maps_next);
        free(u->debug_file);
        free(u->name);
        free(u);
}

/* What libdw can do at pc: only .eh_frame counts (see the top). */
static enum unw_cfi cfi_at(void *arg, uint64_t pc)
{
        struct unwinder *u = arg;
        Dwfl_Module *mod = dwfl_addrmodule(u->dwfl, pc);
        Dwarf_Frame *frame;
        Dwarf_CFI *cfi;
        Dwarf_Addr bias;

        if (!mod)
                return UNW_CFI_NO_MODULE;
        cfi = dwfl_module_eh_cfi(mod, &bias);
        if (!cfi)
                return UNW_CFI_NONE;
        if (dwarf_cfi_addrframe(cfi, pc - bias, &frame) != 0)
                return UNW_CFI_NO_FDE;
        free(frame);
        return UNW_CFI_FDE;
}

static bool step_read_word(void *arg, uint64_t addr, uint64_t *val)
{
        Dwarf_Word w;

        if (!memory_read(NULL, addr, &w, arg))
                return false;
        *val = w;
        return true;
}

static bool step_read_code(void *arg, uint64_t addr, uint8_t code[16])
{
        struct unwinder *u = arg;
        struct code_line *line;

        if (addr < 16)
                return false;
        if (!u->code_cache)
                u->code_cache = calloc(CODE_CACHE_LINES, sizeof(*u->code_cache));
        line = u->code_cache ? &u->code_cache[(addr ^ (addr >> 12)) % CODE_CACHE_LINES] : NULL;
        if (line && line->addr == addr) {
                memcpy(code, line->code, 16);
                return true;
        }
        /* Code outside every module file (a JIT's) is not read: the
         * target's memory is not read at all (see the top). */
        if (!module_bytes(u, addr - 16, code, 16))
                return false;
        if (line) {
                line->addr = addr;
                memcpy(line->code, code, 16);
        }
        return true;
}

/* A pointer a module's file holds at addr (a GOT slot), relocated as a
 * static-pie's self-relocation does: the file's value plus the load bias.
 * (A dynamic link's slots hold something else: the check the caller makes
 * of where it points then fails.) */
static bool step_read_ptr(void *arg, uint64_t addr, uint64_t *val)
{
        struct unwinder *u = arg;
        uint64_t bias;

        if (!file_bytes(u, addr, val, sizeof(*val), true, &bias))
                return false;
        *val += bias;
        return true;
}

/* Keep a frame's registers for the step that follows it; libdw knows
 * those its CFI restored (and sp, the CFA), the first frame all. */
static void keep_stuck_regs(struct unwinder *u, Dwfl_Frame *frame, uint64_t pc)
{
        for (unsigned i = 0; i < D9_STACK_NREGS; i++) {
                Dwarf_Word v;
                u->stuck_regs[i] = dwfl_frame_reg(frame, i, &v) == 0 ? v : 0;
        }
        u->stuck_regs[D9_DW_RIP] = pc;
}

static int frame_cb(Dwfl_Frame *frame, void *arg)
{
        struct unwinder *u = arg;
        Dwarf_Addr pc;
        bool activation, ret;
        enum unw_cfi cfi;

        if (!dwfl_frame_pc(frame, &pc, &activation))
                return DWARF_CB_ABORT;
        ret = !activation || (u->walk_first && u->walk_from_return);
        u->walk_first = false;
        if (u->n_user == u->max_frames) {
                u->stats.truncated++;
                u->capped = true;
                return DWARF_CB_ABORT;
        }
        if (u->n_out == u->cap_out || pc == 0)
                return DWARF_CB_ABORT;
        cfi = cfi_at(u, ret ? pc - 1 : pc);
        /* A caller outside every module is junk CFI found past the real
         * outermost frame (or a stale slot): dropped, counted. The leaf
         * stays wherever it is (a JIT, the [uprobes] page). */
        if (cfi == UNW_CFI_NO_MODULE && u->n_user > 0) {
                u->stats.outside++;
                return DWARF_CB_ABORT;
        }
        u->out[u->n_out++] = ret ? pc - 1 : pc;
        u->n_user++;
        /* Without an FDE libdw would guess from rbp (its x86-64 fallback)
         * with no check at all: stop it and take the step ourselves. */
        if (cfi != UNW_CFI_FDE) {
                keep_stuck_regs(u, frame, pc);
                u->stuck = true;
                u->stuck_cfi = cfi;
                return DWARF_CB_ABORT;
        }
        return DWARF_CB_OK;
}

/* The time window's budget: true if this record may be unwound. Windows
 * are of the records' time, not d9d's: records held while the plan was
 * built (a second or more of stacks) are unwound in a burst when it lands,
 * and a wall-clock window dropped most of them (a Deno server's first
 * 1-2 s of stalls had no long poll, 290-880 stacks lost per recording).
 * A record older than the window's start (rings of several CPUs) counts
 * in the current window. */
static bool budget_allows(struct unwinder *u, uint64_t ts)
{
        if (ts >= u->window_start + u->window_ns) {
                u->window_start = ts;
                u->window_used = 0;
        }
        return u->window_used < u->budget_ns;
}

/* A pc outside every known module means the maps changed (a process
 * traced from exec loads its libraries after we first looked; dlopen), or
 * it is a JIT's: build the modules of a newer map if one came, else ask
 * for one, at most every WANT_MAPS_NS (each is a read of /proc/PID/maps
 * and opens of the files it names, on another thread). */
#define WANT_MAPS_NS (50 * 1000000ull)

/* Modules for pc, a sample's leaf: true if the Dwfl has one there (after
 * building a newer map's, if one came). A leaf inside a module where the
 * map shows nothing executable ran code the map is older than: it was
 * read while ld.so was mapping that file (the whole file read-only first,
 * then the text over it), as record -- CMD's map read right after the exec
 * can be. Such a module has no file (only executable mappings' files are
 * opened), so no CFI, and until a newer map is built every stack through
 * it loses frames (a CI run: every libc frame's caller, for a whole
 * recording). */
static bool modules_for(struct unwinder *u, uint64_t pc)
{
        Dwfl_Module *mod = u->dwfl ? dwfl_addrmodule(u->dwfl, pc) : NULL;
        uint64_t now;

        if (mod && unwind_maps_executable(u->maps, pc))
                return true;
        if (mod)
                u->stats.maps_stale++;
        /* The same map again (a JIT's pc is outside every module in each
         * one): the modules built from it stay, with what libdw cached. */
        if (u->maps_next && u->dwfl && unwind_maps_same_modules(u->maps_next, u->maps)) {
                unwind_maps_free(u->maps_next);
                u->maps_next = NULL;
        }
        if (u->maps_next && dwfl_load(u) == 0) {
                mod = dwfl_addrmodule(u->dwfl, pc);
                if (mod && unwind_maps_executable(u->maps, pc))
                        return true;
        }
        now = d9_now_ns();
        if (u->want_maps && now - u->last_want_ns > WANT_MAPS_NS) {
                u->last_want_ns = now;
                u->stats.maps_asked++;
                u->want_maps(u->want_ctx);
        }
        return mod != NULL;
}

/* libdw walks per stack: each after steps without CFI. */
#define MAX_WALKS 16

/* Frames without CFI from the one stuck_regs holds, until a pc libdw can
 * unwind (true: walk on from stuck_regs) or the end (false). Frames of a
 * frame-pointer build follow each other here without a libdw walk each. */
static bool steps_without_cfi(struct unwinder *u, const struct unw_step_ops *o, bool leaf)
{
        for (;;) {
                enum unw_step_kind k = unwind_step_no_cfi(o, u->stuck_regs, u->stuck_cfi, leaf);
                uint64_t pc = u->stuck_regs[D9_DW_RIP];

                /* Every step moves sp up: no loop. */
                if (k == UNW_STEP_NONE || pc == 0)
                        return false;
                u->stats.steps[k]++;
                leaf = false;
                u->stuck_cfi = cfi_at(u, pc - 1);
                if (u->stuck_cfi == UNW_CFI_FDE)
                        return true;
                if (u->n_user == u->max_frames) {
                        u->stats.truncated++;
                        u->capped = true;
                        return false;
                }
                if (u->n_out == u->cap_out)
                        return false;
                u->out[u->n_out++] = pc - 1;
                u->n_user++;
        }
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

/* A sample taken while the thread was in one of d9d's own uprobe traps
 * has its user pc one past the int3, and the probed instruction has not
 * run. The CFI there already counts a one-byte first instruction as done
 * (`push rbp` at a function's entry, `ret` at a return site), and the walk
 * read the wrong word as the return address (npm apimock, the full set:
 * 4 of 20 such samples stopped at their leaf). Unwound from the site, the
 * return address is at sp. A thread past the site with the push done has
 * the saved rbp at sp instead, no return address, and keeps its pc. A trap
 * runs in the kernel: a sample with no kernel frames (the timer hit user
 * mode) is in none, and skips the module lookup. */
static void trap_site_pc(struct unwinder *u, const struct unw_step_ops *o)
{
        uint64_t pc = u->walk_regs[D9_DW_RIP], vaddr, ra;

        if (!u->n_sites || !u->rec->n_kern || pc < 1 || unwinder_link_vaddr(u, pc - 1, u->sites_build_id, &vaddr) < 0 ||
            !bsearch(&vaddr, u->sites, u->n_sites, sizeof(*u->sites), cmp_u64) ||
            !o->read_word(o->ctx, u->walk_regs[D9_DW_RSP], &ra) || !unwind_is_return_address(o, ra))
                return;
        u->walk_regs[D9_DW_RIP] = pc - 1;
        u->stats.trap_sites++;
}

int unwinder_set_trap_sites(struct unwinder *u, const char *build_id, const uint64_t *sites, size_t n)
{
        uint64_t *copy = malloc((n ? n : 1) * sizeof(*copy));

        if (!copy)
                return -ENOMEM;
        memcpy(copy, sites, n * sizeof(*copy));
        qsort(copy, n, sizeof(*copy), cmp_u64);
        free(u->sites);
        u->sites = copy;
        u->n_sites = n;
        u->sites_build_id = build_id;
        return 0;
}

static void unwind_user(struct unwinder *u)
{
        static const struct unw_step_ops ops = {
                .read_word = step_read_word, .read_code = step_read_code, .read_ptr = step_read_ptr,
                .cfi_at = cfi_at,
        };
        struct unw_step_ops o = ops;
        uint64_t pc = u->rec->regs[D9_DW_RIP];

        modules_for(u, pc);
        if (!u->dwfl)
                return;
        o.ctx = u;
        memcpy(u->walk_regs, u->rec->regs, sizeof(u->walk_regs));
        trap_site_pc(u, &o);
        u->walk_from_return = false;
        /* Each walk stops with an error at the outermost frame or where
         * the copy runs out (the frames so far are the result), or at a
         * frame without CFI, where unwind_step's steps may find the callers
         * and a new walk starts at the first one with CFI. */
        u->unwinding = true;
        for (int walks = 1;; walks++) {
                u->walk_first = true;
                u->stuck = false;
                dwfl_getthread_frames(u->dwfl, (pid_t)u->rec->hdr.tid, frame_cb, u);
                if (!u->stuck || walks == MAX_WALKS || u->n_user >= u->max_frames ||
                    u->n_out >= u->cap_out ||
                    !steps_without_cfi(u, &o, u->n_user == 1 && !u->walk_from_return))
                        break;
                memcpy(u->walk_regs, u->stuck_regs, sizeof(u->walk_regs));
                u->walk_from_return = true;
        }
        u->unwinding = false;
}

int unwinder_stack(struct unwinder *u, const struct d9_rec_stack *rec, size_t size,
                   uint64_t *out, size_t cap, uint32_t *n_kern)
{
        /* This thread's CPU time: what an unwind costs, whatever else runs
         * on the machine. The budget counted wall time, so on a loaded
         * machine every preemption of d9d mid-unwind was charged to it and
         * stacks were dropped while d9d itself used a few percent of a core. */
        uint64_t cpu = d9_thread_cpu_ns(), spent;

        if (size < D9_REC_STACK_FIXED || rec->n_kern > D9_STACK_KERN_MAX ||
            rec->user_len > (rec->flags & D9_SREC_DEEP ? D9_STACK_DEEP_MAX : D9_STACK_USER_MAX) ||
            rec->n_fp > D9_STACK_FP_MAX || rec->unread_len > rec->user_len ||
            rec->unread_at > rec->user_len - rec->unread_len ||
            size < D9_REC_STACK_FIXED + rec->user_len ||
            (rec->n_fp && size < D9_REC_STACK_FIXED + ((rec->user_len + 7) & ~7u) +
                                 rec->n_fp * sizeof(struct d9_fp_frame)))
                return -EBADMSG;
        if (!(rec->flags & (D9_SREC_USER_FP | D9_SREC_NO_REGS)) && !u->dwfl) {
                active = u;
                modules_for(u, rec->regs[D9_DW_RIP]);
                active = NULL;
                if (!u->dwfl)
                        return -ENOENT;
        }
        if (!budget_allows(u, rec->hdr.ts)) {
                u->stats.over_budget++;
                return -EBUSY;
        }
        u->out = out;
        u->cap_out = cap;
        u->n_out = 0;
        u->n_user = 0;
        u->cut = false;
        u->unread = false;
        u->capped = false;
        for (uint32_t i = 0; !u->hide_kernel && i < rec->n_kern && u->n_out < cap; i++)
                out[u->n_out++] = rec->kern[i];
        if (n_kern)
                *n_kern = (uint32_t)u->n_out;
        if (rec->flags & D9_SREC_USER_FP) {
                const uint64_t *ips = (const uint64_t *)(const void *)rec_user(rec);
                for (uint32_t i = 0; i < rec->user_len / 8 && u->n_out < cap && ips[i]; i++)
                        out[u->n_out++] = ips[i];
        } else if (!(rec->flags & D9_SREC_NO_REGS)) {
                u->rec = rec;
                active = u;
                unwind_user(u);
                active = NULL;
                u->rec = NULL;
        }
        /* Cut short by max_frames or the caller's array is not "cut". */
        if (u->n_user >= u->max_frames || u->n_out >= cap)
                u->cut = u->unread = false;
        u->unread &= !u->cut;
        u->stats.cut += u->cut;
        u->stats.unread += u->unread;
        spent = d9_thread_cpu_ns() - cpu;
        u->window_used += spent;
        u->stats.ns += spent;
        u->stats.stacks++;
        u->stats.frames += u->n_user;
        return (int)u->n_out;
}

void unwinder_get_stats(const struct unwinder *u, struct unwind_stats *st)
{
        *st = u->stats;
}

bool unwinder_last_cut(const struct unwinder *u)
{
        return u->cut;
}

bool unwinder_last_unread(const struct unwinder *u)
{
        return u->unread;
}

bool unwinder_last_capped(const struct unwinder *u)
{
        return u->capped;
}

/* Named through libdwfl, not elfsym: the unwinder already holds a Dwfl
 * module for every mapping of this address space (built for its .eh_frame),
 * and asking that module checks the unwinder's own view of which file is
 * at addr. Only the demangling is the shared one, so these names match the
 * sealer's. */
const char *unwinder_addr_name(struct unwinder *u, uint64_t addr)
{
        Dwfl_Module *mod;
        const char *raw = NULL;
        GElf_Off off;
        GElf_Sym sym;

        active = u;
        mod = u->dwfl ? dwfl_addrmodule(u->dwfl, addr) : NULL;
        if (mod)
                raw = dwfl_module_addrinfo(mod, addr, &off, &sym, NULL, NULL, NULL);
        active = NULL;
        if (!raw)
                return NULL;
        free(u->name);
        u->name = d9_sym_demangle(raw, NULL);
        return u->name;
}

int unwind_file_has_cfi(int fd)
{
        struct stat st;
        Elf *elf;
        size_t n;
        int r = 0;

        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return -EBADFD;
        elf_version(EV_CURRENT);
        elf = elf_begin(fd, ELF_C_READ, NULL);
        if (!elf || elf_getphdrnum(elf, &n) != 0) {
                elf_end(elf);
                return -ENOEXEC;
        }
        /* PT_GNU_EH_FRAME is what the unwinder uses (.eh_frame_hdr). */
        for (size_t i = 0; i < n && !r; i++) {
                GElf_Phdr ph;
                r = gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_GNU_EH_FRAME && ph.p_memsz > 0;
        }
        elf_end(elf);
        return r;
}

int unwind_exe_has_cfi(pid_t pid)
{
        char path[64];
        _cleanup_close_ int fd = -1;

        /* The magic link itself (d9_target_file_open refuses links);
         * unwind_file_has_cfi reads regular files only, never a FIFO. */
        snprintf(path, sizeof(path), "/proc/%d/exe", pid);
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        return fd < 0 ? -errno : unwind_file_has_cfi(fd);
}
/* Does mod carry build_id (hex)? NULL or an unreadable id: assume it does. */
static bool module_has_build_id(Dwfl_Module *mod, const char *build_id)
{
        const unsigned char *bits;
        GElf_Addr where;
        int n;

        if (!build_id)
                return true;
        n = dwfl_module_build_id(mod, &bits, &where);
        if (n <= 0)
                return true;
        if (strlen(build_id) != (size_t)n * 2)
                return false;
        for (int i = 0; i < n; i++) {
                char hex[3];

                snprintf(hex, sizeof(hex), "%02x", bits[i]);
                if (strncmp(build_id + 2 * i, hex, 2))
                        return false;
        }
        return true;
}

int unwinder_link_vaddr(struct unwinder *u, uint64_t addr, const char *build_id, uint64_t *vaddr)
{
        Dwfl_Module *mod;
        Dwarf_Addr bias = 0;
        struct unwinder *was;
        int r = -ENOENT;

        Dwarf_Addr lo = 0, hi = 0;

        if (!u->dwfl)
                return -ENOENT;
        if (u->lv_hi && build_id == u->lv_build_id && addr >= u->lv_lo && addr < u->lv_hi) {
                *vaddr = addr - u->lv_bias;
                return 0;
        }
        /* Also called inside a walk (trap_site_pc), where active is u. */
        was = active;
        active = u;
        mod = dwfl_addrmodule(u->dwfl, addr);
        if (mod && module_has_build_id(mod, build_id) && dwfl_module_getelf(mod, &bias)) {
                *vaddr = addr - bias;
                r = 0;
                dwfl_module_info(mod, NULL, &lo, &hi, NULL, NULL, NULL, NULL);
                u->lv_lo = lo;
                u->lv_hi = hi;
                u->lv_bias = bias;
                u->lv_build_id = build_id;
        }
        active = was;
        return r;
}

/* The last function start at or below vaddr in the module's
 * .eh_frame_hdr table, as its file holds it, and its FDE's address. */
static bool eh_hdr_fn_start(Elf *elf, uint64_t vaddr, uint64_t *start, uint64_t *fde)
{
        struct d9_eh_table t;
        size_t n_ph;
        GElf_Phdr ph;

        if (elf_getphdrnum(elf, &n_ph) != 0)
                return false;
        for (size_t i = 0; i < n_ph; i++) {
                Elf_Data *d;
                uint32_t above;

                if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_GNU_EH_FRAME)
                        continue;
                d = elf_getdata_rawchunk(elf, (int64_t)ph.p_offset, ph.p_filesz, ELF_T_BYTE);
                if (!d || d->d_size != ph.p_filesz || !d9_eh_table_read(d->d_buf, d->d_size, ph.p_vaddr, &t) ||
                    !(above = d9_eh_table_above(&t, vaddr)))
                        return false;
                *start = d9_eh_table_start(&t, above - 1);
                *fde = d9_eh_table_fde(&t, above - 1);
                return true;
        }
        return false;
}

/* The module's file only, which the walk has open (unwind_maps.c, off the
 * drain loop): no symbol lookup, which would look for a debug file here.
 * The FDE must cover addr (its 32-bit length and pc_range after a 4-byte
 * pc_begin, as x86-64 toolchains write them): code without one of its own
 * (musl's) is no function start's. The FDE's length and range are what
 * the file holds also where .eh_frame lies in a writable segment (npm
 * ace-tool-rs, musl static-pie): relocation changes neither. */
int unwinder_fn_start(struct unwinder *u, uint64_t addr, uint64_t *start)
{
        struct unwinder *was = active;
        uint32_t fde_head[4];
        uint64_t fn, fde, fde_bias;
        GElf_Addr bias = 0;
        Dwfl_Module *mod;
        Elf *elf;
        int r = -ENOENT;

        if (!u->dwfl)
                return -ENOENT;
        active = u;
        mod = dwfl_addrmodule(u->dwfl, addr);
        if (mod && (elf = dwfl_module_getelf(mod, &bias)) && eh_hdr_fn_start(elf, addr - bias, &fn, &fde) &&
            file_bytes(u, fde + bias, fde_head, sizeof(fde_head), true, &fde_bias) && fde_head[0] >= 12 &&
            fde_head[0] != 0xffffffffu && addr - bias < fn + fde_head[3]) {
                *start = fn + bias;
                r = 0;
        }
        active = was;
        return r;
}
