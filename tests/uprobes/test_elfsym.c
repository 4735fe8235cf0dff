/* elfsym (uprobes/elfsym): the one symbol table and demangler the probe
 * planner and the sealer read. Runs on this test's own executable, whose
 * symbol table carries functions named in Rust's two manglings, C++'s and
 * plain C, one of them without a size; then asks the sealer
 * (daemon/symbolize) for the same addresses, which must come back with the
 * same names. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#include "daemon/symbolize/symbolize.h"
#include "tests/tap.h"
#include "uprobes/elfsym/elfsym.h"

/* Functions under mangled names, as rustc and g++ would emit them; each
 * body is a few instructions long, so an address inside one is not its
 * start. */
static volatile int sink;
#define BODY { sink += 1; sink *= 3; }
__attribute__((noinline, used)) void legacy_fn(void) __asm__("_ZN5tokio7runtime4task3raw4poll17h0094d2c6925f5603E.llvm.9216869784229665726");
__attribute__((noinline, used)) void legacy_fn(void) BODY
__attribute__((noinline, used)) void v0_fn(void) __asm__("_RNvNtNtNtCs5RdOu2GIbpd_5tokio7runtime4task5waker11wake_by_val.llvm.123");
__attribute__((noinline, used)) void v0_fn(void) BODY
__attribute__((noinline, used)) void cxx_fn(int) __asm__("_ZN3foo3barEi");
__attribute__((noinline, used)) void cxx_fn(int x) { sink += x; sink *= 3; }
void plain_c_fn(void);
__attribute__((noinline, used)) void plain_c_fn(void) BODY
/* Hand-written code without .size, as in assembly files: size 0. */
__asm__(".text\n.globl unsized_fn\n.type unsized_fn, @function\nunsized_fn:\n"
        "nop\nnop\nnop\nnop\nret\n");
void unsized_fn(void);

static uint64_t load_bias;

static int first_object(struct dl_phdr_info *info, size_t size, void *data)
{
        (void)size;
        (void)data;
        load_bias = info->dlpi_addr; /* the first object is the executable */
        return 1;
}

static uint64_t link_addr(void (*fn)(void))
{
        return (uint64_t)(uintptr_t)fn - load_bias;
}

static void check_demangle(const char *raw, const char *want, bool want_v0)
{
        bool v0 = !want_v0;
        char *got = d9_sym_demangle(raw, &v0);

        ok(got && !strcmp(got, want) && v0 == want_v0, "demangle %.50s -> %s (got %s)", raw, want,
           got ? got : "NULL");
        free(got);
}

static void test_demangle(void)
{
        /* Legacy: hash and LLVM clone suffix go, ".." inside generics stays decoded. */
        check_demangle("_ZN5tokio7runtime4task3raw4poll17h0094d2c6925f5603E.llvm.9216869784229665726",
                       "tokio::runtime::task::raw::poll", false);
        check_demangle("_ZN4core3ptr51drop_in_place$LT$tokio..runtime..driver..Driver$GT$17hcab244fd23842742E",
                       "core::ptr::drop_in_place<tokio::runtime::driver::Driver>", false);
        check_demangle("_ZN5tokio4task4poll17h0123456789abcdefE.cold", "tokio::task::poll", false);
        /* v0: generics kept, crate disambiguators and clone suffix dropped. */
        check_demangle("_RNvNtNtNtCs5RdOu2GIbpd_5tokio7runtime4task5waker11wake_by_val.llvm.123",
                       "tokio::runtime::task::waker::wake_by_val", true);
        /* C++ (V8 in deno, libstdc++): with parameters, as frames show it. */
        check_demangle("_ZN3foo3barEv", "foo::bar()", false);
        check_demangle("_ZNSt6vectorIiSaIiEE9push_backERKi",
                       "std::vector<int, std::allocator<int> >::push_back(int const&)", false);
        check_demangle("main", "main", false);
        check_demangle("_Zgarbage", "_Zgarbage", false);
}

/* BOLT's and the compilers' names for code that is not a function's entry
 * (npm mise: NAME.org.0 jumps to the moved body, NAME.cold.0 is its cold
 * part); LLVM's and GCC's clones are entries. */
static void test_not_an_entry(void)
{
        static const struct { const char *raw; bool not_entry; } cases[] = {
                { "_ZN5tokio7runtime4task3raw4poll17h4dd3692a1e7affe3E.org.0", true },
                { "_ZN5tokio7runtime4task3raw4poll17h4dd3692a1e7affe3E.cold.0", true },
                { "_ZN5tokio4task4poll17h0123456789abcdefE.cold", true },
                { "foo.cold", true },
                { "_ZN5tokio7runtime4task3raw4poll17h0094d2c6925f5603E.llvm.9216869784229665726", false },
                { "_ZN5tokio7runtime4task3raw4poll17h4dd3692a1e7affe3E", false },
                { "foo.part.0", false },
                { "foo.constprop.0", false },
                { "foo.org", false },
                { "foo.cold.0x", false },
                { "cold", false },
                { "_ZN3org4cold4poll17h0123456789abcdefE", false },
        };
        size_t n = sizeof(cases) / sizeof(*cases), right = 0;

        for (size_t i = 0; i < n; i++) {
                right += d9_sym_not_an_entry(cases[i].raw) == cases[i].not_entry;
                if (d9_sym_not_an_entry(cases[i].raw) != cases[i].not_entry)
                        diag("%s: want %s", cases[i].raw, cases[i].not_entry ? "not an entry" : "an entry");
        }
        ok(right == n, "BOLT's .org.N copies and .cold parts are no entries, clones are: %zu of %zu", right, n);
}

static int load_self(struct d9_sym_table *t, bool *has_symtab)
{
        int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        Elf *elf;
        int r;

        if (fd < 0)
                return -errno;
        elf = elf_begin(fd, ELF_C_READ, NULL);
        r = elf ? d9_sym_table_add_elf(t, elf, has_symtab) : -ENOEXEC;
        elf_end(elf);
        close(fd);
        return r;
}

static void check_named(struct d9_sym_table *t, void (*fn)(void), const char *want)
{
        struct d9_sym *s = d9_sym_table_find(t, link_addr(fn) + 1);

        ok(s && s->size > 1 && !strcmp(d9_sym_name(s), want), "address inside %s names it (got %s)", want,
           s ? d9_sym_name(s) : "NULL");
}

static void test_table(void)
{
        struct d9_sym_table t = { 0 };
        bool has_symtab = false;
        int once, r;

        once = load_self(&t, &has_symtab);
        ok(once > 0 && has_symtab, "this executable's .symtab gives %d function symbols", once);
        r = load_self(&t, NULL);
        d9_sym_table_sort(&t);
        ok(r == once && t.n <= (size_t)once, "the same file loaded twice: %zu of %d entries stay after sort", t.n,
           2 * once);
        for (size_t i = 1; i < t.n; i++)
                if (t.syms[i - 1].vaddr > t.syms[i].vaddr ||
                    (t.syms[i - 1].vaddr == t.syms[i].vaddr && strcmp(t.syms[i - 1].raw, t.syms[i].raw) >= 0)) {
                        ok(0, "sorted by address then name, no duplicates (at %zu)", i);
                        break;
                }

        check_named(&t, legacy_fn, "tokio::runtime::task::raw::poll");
        check_named(&t, v0_fn, "tokio::runtime::task::waker::wake_by_val");
        check_named(&t, (void (*)(void))cxx_fn, "foo::bar(int)");
        check_named(&t, plain_c_fn, "plain_c_fn");
        struct d9_sym *v0 = d9_sym_table_find(&t, link_addr(v0_fn));
        ok(v0 && v0->v0 && !d9_sym_table_find(&t, link_addr(legacy_fn))->v0, "v0 told from legacy mangling");

        uint64_t unsized = link_addr(unsized_fn);
        struct d9_sym *at = d9_sym_table_find(&t, unsized);
        ok(at && at->size == 0 && !strcmp(at->raw, "unsized_fn"), "a size-0 symbol is found at its address");
        ok(!d9_sym_table_find(&t, unsized + 2), "d9_sym_table_find: not past its address");
        at = d9_sym_table_find_nearest(&t, unsized + 2);
        ok(at && !strcmp(at->raw, "unsized_fn"), "d9_sym_table_find_nearest: up to the next symbol");
        ok(!d9_sym_table_find(&t, 0x10) && !d9_sym_table_find_nearest(&t, 0x10), "below every symbol: nothing");
        d9_sym_table_free(&t);
        ok(t.n == 0 && !t.syms, "freed table is empty");
}

/* The sealer, from this process's maps, names the same addresses alike. */
static void test_sealer_agrees(void)
{
        char *maps = symbolizer_read_proc_text("/proc/self/maps");
        struct symbolizer *s = maps ? symbolizer_new(getpid(), maps) : NULL;
        struct { void (*fn)(void); const char *want; } cases[] = {
                { legacy_fn, "tokio::runtime::task::raw::poll" },
                { (void (*)(void))cxx_fn, "foo::bar(int)" },
                { plain_c_fn, "plain_c_fn" },
                { unsized_fn, "unsized_fn" },
        };

        if (!s)
                bail("no symbolizer for /proc/self/maps");
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                uint64_t size;
                const char *got = symbolizer_lookup(s, (uint64_t)(uintptr_t)cases[i].fn + 2, &size);

                ok(got && !strcmp(got, cases[i].want), "sealer names %s as the planner does (got %s)",
                   cases[i].want, got ? got : "NULL");
        }
        symbolizer_free(s);
        free(maps);
}

int main(void)
{
        elf_version(EV_CURRENT);
        dl_iterate_phdr(first_object, NULL);
        test_demangle();
        test_not_an_entry();
        test_table();
        test_sealer_agrees();
        return tap_done();
}
