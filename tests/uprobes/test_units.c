/* Unit checks (TAP) for the pieces of uprobes/ whose inputs are easy to write
 * down: name normalization (demangling itself is tests/uprobes/test_elfsym.c),
 * the Tokio version from source paths and the x86 first-instruction classes.
 * The real-binary tests (check_plan.py) cover the same code on real targets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokio.h"
#include "uprobes_int.h"

static int n_tests, n_failed;

static void ok(int cond, const char *name, const char *got)
{
        n_tests++;
        if (!cond)
                n_failed++;
        printf("%s %d - %s\n", cond ? "ok" : "not ok", n_tests, name);
        if (!cond && got)
                printf("# got: %s\n", got);
}

static void check_strip(const char *in, const char *want)
{
        char *got = uprobes_name_strip_generics(in);
        char name[200];

        snprintf(name, sizeof(name), "strip generics: %.80s -> %.60s", in, want);
        ok(got && strcmp(got, want) == 0, name, got);
        free(got);
}

static void check_arg(const char *in, const char *after, const char *want)
{
        char *got = uprobes_name_first_generic_arg(in, after);
        char name[200];

        snprintf(name, sizeof(name), "first generic arg of %.40s in %.60s", after, in);
        ok(got && strcmp(got, want) == 0, name, got);
        free(got);
}

static void check_version(const char *rodata, const char *want)
{
        char *got = uprobes_tokio_version_in((const uint8_t *)rodata, strlen(rodata));
        char name[200];

        snprintf(name, sizeof(name), "tokio version %s from ...%.70s", want ? want : "none",
                 rodata + (strlen(rodata) > 70 ? strlen(rodata) - 70 : 0));
        ok(want ? got && strcmp(got, want) == 0 : !got, name, got ? got : "(none)");
        free(got);
}

static void check_insn(const char *what, const uint8_t *bytes, size_t n, int len, enum probe_insn_class cls)
{
        struct x86_insn in;
        char name[96], got[64];

        uprobes_x86_decode(bytes, n, &in);
        snprintf(name, sizeof(name), "insn %s: %d bytes, %s", what, len,
                 cls == PROBE_INSN_EMULATED ? "emulated" : "single-step");
        snprintf(got, sizeof(got), "len %d class %d (%s)", in.len, in.cls, in.what);
        ok(in.len == len && in.cls == cls, name, got);
}

#define INSN(what, len, cls, ...)                                                   \
        do {                                                                        \
                static const uint8_t b_[] = { __VA_ARGS__ };                        \
                check_insn(what, b_, sizeof(b_), len, cls);                         \
        } while (0)

static void check_glue(const char *name, const char *want)
{
        char *got = uprobes_future_from_drop_glue(name);

        if (!got && strstr(name, "CoreStage<"))
                got = uprobes_future_from_core_stage_glue(name);
        char what[200];

        snprintf(what, sizeof(what), "drop glue %.70s names %.60s", name + 24, want ? want : "no task type");
        ok(want ? got && !strcmp(got, want) : !got, what, got);
        free(got);
}

int main(void)
{
        check_strip("<tokio::runtime::task::list::OwnedTasks<alloc::sync::Arc<tokio::runtime::scheduler::"
                    "current_thread::Handle>>>::bind::<uptgt::Custom>",
                    "tokio::runtime::task::list::OwnedTasks::bind");
        check_strip("tokio::runtime::task::list::OwnedTasks<S>::bind", "tokio::runtime::task::list::OwnedTasks::bind");
        check_strip("tokio::runtime::task::raw::poll::<a::F<fn() -> u8>, b::S>", "tokio::runtime::task::raw::poll");
        check_strip("<tokio::runtime::scheduler::multi_thread::worker::Context>::park_internal",
                    "tokio::runtime::scheduler::multi_thread::worker::Context::park_internal");
        check_strip("<a::X as core::future::future::Future>::poll", "<a::X as core::future::future::Future>::poll");

        check_arg("tokio::runtime::task::raw::poll::<uptgt::blocker::{closure#0}, alloc::sync::Arc<h::Handle>>",
                  "raw::poll", "uptgt::blocker::{closure#0}");
        check_arg("tokio::runtime::task::raw::poll::<a::F<fn() -> u8, c::D>, b::S>", "raw::poll",
                  "a::F<fn() -> u8, c::D>");
        check_arg("core::ptr::drop_in_place<alloc::boxed::Box<tokio::runtime::task::core::Cell<d9::f::{{closure}},"
                  "alloc::sync::Arc<h::Handle>>>>", "task::core::Cell", "d9::f::{{closure}}");

        /* The drop glue that names a legacy build's task type: Cell<T, S>,
         * Stage<T>, or (the less sure) Tokio 1.49's CoreStage<T> (npm
         * vaulttools-mcp); not any other glue. */
        check_glue("core::ptr::drop_in_place<tokio::runtime::task::core::Cell<d9::f::{{closure}},"
                   "alloc::sync::Arc<h::Handle>>>", "d9::f::{{closure}}");
        check_glue("core::ptr::drop_in_place<tokio::runtime::task::core::Stage<d9::Custom>>", "d9::Custom");
        check_glue("core::ptr::drop_in_place<tokio::runtime::task::core::CoreStage<tracing::instrument::"
                   "Instrumented<rmcp::service::serve_inner<a::R,b::S>::{{closure}}::{{closure}}>>>",
                   "tracing::instrument::Instrumented<rmcp::service::serve_inner<a::R,b::S>::{{closure}}::{{closure}}>");
        check_glue("core::ptr::drop_in_place<tokio::runtime::task::core::Trailer>", NULL);
        check_glue("tokio::runtime::task::core::CoreStage<T>::drop_future_or_output", NULL);
        ok(!uprobes_future_from_drop_glue("core::ptr::drop_in_place<tokio::runtime::task::core::CoreStage<a::F>>"),
           "a CoreStage's glue is not taken with a Cell's", NULL);

        ok(uprobes_label_is_boxed_dyn_future("core::pin::Pin<alloc::boxed::Box<dyn core::future::future::Future<Output = ()>"
                                     " + core::marker::Send>>"), "Pin<Box<dyn Future>> recognised (v0)", NULL);
        ok(!uprobes_label_is_boxed_dyn_future("uptgt::Custom"), "a named future is not boxed", NULL);
        ok(uprobes_tokio_rule_match("tokio::runtime::scheduler::current_thread::Context::park_yield")->kind == PROBE_PARK,
           "current_thread park_yield is a park", NULL);
        ok(!uprobes_tokio_rule_match("tokio::runtime::task::raw::RawTask::poll"),
           "RawTask::poll is not probed (its out-of-line copy never runs)", NULL);
        ok(!uprobes_tokio_rule_match("mycrate::task::raw::poll"), "only tokio:: paths match", NULL);

        /* Tokio's version from panic-location paths; rustc strings are not
         * NUL-separated, so the paths run into each other as in .rodata. */
        check_version("/root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/tokio-1.43.0/src/runtime/park.rs"
                      "/root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/tokio-1.43.0/src/task/mod.rs",
                      "1.43.0");
        /* A content-addressed source tree (deltachat-rpc-server 2.62 from npm): the hash is not the version. */
        check_version("/sources/tokio-1.53.1-202caea871b69668250d242070849eb495be178ed697a3e98aebce5bc81a0bed/src/"
                      "signal/ctrl_c.rs/sources/tokio-1.53.1-202caea871b69668250d242070849eb495be178ed697a3e98aebce5b"
                      "c81a0bed/src/io/util/buf_writer.rs", "1.53.1");
        check_version("x/tokio-1.0.0-alpha.1/src/lib.rs", "1.0.0-alpha.1");
        check_version("tokio-util-0.7.1/src/a.rs tokio-1.24.2/src/b.rs tokio-1.24.2/src/c.rs", "1.24.2");
        check_version("tokio-stream tokio-rt-worker tokio-/src", NULL);

        /* What the kernel emulates (arch/x86/kernel/uprobes.c) and what it steps. */
        INSN("push %rbp", 1, PROBE_INSN_EMULATED, 0x55);
        INSN("push %r12", 2, PROBE_INSN_EMULATED, 0x41, 0x54);
        INSN("jmp rel32", 5, PROBE_INSN_EMULATED, 0xe9, 1, 2, 3, 4);
        INSN("call rel32", 5, PROBE_INSN_EMULATED, 0xe8, 1, 2, 3, 4);
        INSN("jne rel32", 6, PROBE_INSN_EMULATED, 0x0f, 0x85, 1, 2, 3, 4);
        INSN("nopl 0(%rax,%rax)", 5, PROBE_INSN_EMULATED, 0x0f, 0x1f, 0x44, 0, 0);
        INSN("66 e8 (operand-size prefix)", 6, PROBE_INSN_SSTEP, 0x66, 0xe8, 1, 2, 3, 4);
        INSN("endbr64", 4, PROBE_INSN_SSTEP, 0xf3, 0x0f, 0x1e, 0xfa);
        INSN("push $imm8", 2, PROBE_INSN_SSTEP, 0x6a, 0);
        INSN("sub $0xa0,%rsp", 7, PROBE_INSN_SSTEP, 0x48, 0x81, 0xec, 0xa0, 0, 0, 0);
        INSN("mov %rdi,%rbx", 3, PROBE_INSN_SSTEP, 0x48, 0x89, 0xfb);
        INSN("ret", 1, PROBE_INSN_SSTEP, 0xc3);
        INSN("movabs $imm64,%rax", 10, PROBE_INSN_SSTEP, 0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8);
        INSN("vmovdqu (%rsi),%ymm0 (VEX)", 4, PROBE_INSN_SSTEP, 0xc5, 0xfe, 0x6f, 0x06);
        INSN("vpternlogd $0x96 (EVEX)", 7, PROBE_INSN_SSTEP, 0x62, 0xf3, 0x75, 0x48, 0x25, 0xc2, 0x96);
        INSN("lea 0x20(%rbx),%r15", 4, PROBE_INSN_SSTEP, 0x4c, 0x8d, 0x7b, 0x20);

        printf("1..%d\n", n_tests);
        return n_failed ? 1 : 0;
}
