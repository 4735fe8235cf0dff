//! d9-target: a small Tokio program that d9d's tests trace.
//!
//! Modes: `server` (TCP request/response), `load` (client for the server,
//! prints throughput), `mixed` (spawn churn, channel ping-pong, timers and
//! tasks that block their worker; prints its own counts as JSON at exit so
//! tests can compare what the tracer saw with the truth), `pool` (blocking
//! pool traffic), `inplace` (block_in_place all the time), `runtimes` (three runtimes in one process), `backlog` (a
//! listener that accepts only when told to, for accept-queue tests).

mod args;
mod backlog;
mod boxed;
mod counted;
mod deep;
mod load;
mod inplace;
mod mixed;
mod pool;
mod runtimes;
mod selfwake;
mod server;

use args::{Args, Flavor};
use std::io::BufRead;
use std::process::exit;

/// Tokio version this binary was built against; set by build-target.
pub const TOKIO_VERSION: &str = match option_env!("D9_TOKIO_VERSION") {
    Some(v) => v,
    None => "unknown",
};

thread_local! {
    /// 24 KiB of static TLS, as big servers have (npm restate-server:
    /// 19 KiB): glibc and musl put it between every thread's stack and its
    /// thread pointer, which d9d's Worker search must look below.
    static BIG_TLS: std::cell::Cell<[u64; 3072]> = const { std::cell::Cell::new([0; 3072]) };
}

fn build_runtime(args: &Args) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = match args.flavor {
        Flavor::MultiThread => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(args.workers);
            b
        }
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
    };
    if let Some(name) = &args.thread_name {
        b.thread_name(name.clone());
    }
    b.on_thread_start(|| {
        BIG_TLS.with(|c| {
            std::hint::black_box(c.as_ptr());
        })
    });
    if args.unpark_sleep_every > 0 {
        let every = args.unpark_sleep_every;
        let unparks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        b.on_thread_unpark(move || {
            if unparks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % every == every - 1 {
                unpark_hook_sleep_3ms();
            }
        });
    }
    // Pool and inplace modes: blocking threads retire soon after their job, so they come
    // and go all the time (Tokio's default keeps them 10 s).
    if args.mode == args::Mode::Pool || args.mode == args::Mode::Inplace {
        b.thread_keep_alive(std::time::Duration::from_millis(300));
    }
    b.enable_all().build()
}

/// A worker asleep in its own loop, outside any task poll, and not parked
/// (`--unpark-sleep-every`): what a blocking thread hook, a task's drop or
/// a `brk` under the mmap lock in `free()` looks like from outside.
#[inline(never)]
fn unpark_hook_sleep_3ms() {
    let start = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(3));
    // Work after the call: a tail call would leave no frame of this name.
    std::hint::black_box(start.elapsed());
}

/// Gives a tracer time to attach before any workload runs.
fn wait_before_start(args: &Args) {
    if args.wait_stdin {
        println!("waiting pid {}", std::process::id());
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    }
    if args.start_delay_ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(args.start_delay_ms));
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() || argv[0] == "--help" || argv[0] == "-h" {
        println!("{}", args::USAGE);
        exit(if argv.is_empty() { 2 } else { 0 });
    }
    let args = match args::parse(argv.into_iter()) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("d9-target: {msg} (see d9-target --help)");
            exit(2);
        }
    };
    let rt = match build_runtime(&args) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("d9-target: cannot build the Tokio runtime: {e}");
            exit(1);
        }
    };
    wait_before_start(&args);
    let result = match args.mode {
        args::Mode::Server => rt.block_on(server::run(&args)),
        args::Mode::Load => rt.block_on(load::run(&args)),
        args::Mode::Mixed => rt.block_on(mixed::run(&args)),
        args::Mode::Pool => rt.block_on(pool::run(&args)),
        args::Mode::Inplace => rt.block_on(inplace::run(&args)),
        args::Mode::Runtimes => rt.block_on(runtimes::run(&args)),
        args::Mode::Deep => rt.block_on(deep::run(&args)),
        args::Mode::Deeper => rt.block_on(deep::run_deeper(&args)),
        args::Mode::DeepSleep => rt.block_on(deep::run_sleep(&args)),
        args::Mode::Recurse => rt.block_on(deep::run_recurse(&args)),
        args::Mode::SelfWake => rt.block_on(selfwake::run(&args)),
        args::Mode::Backlog => rt.block_on(backlog::run(&args)),
        args::Mode::Boxed => rt.block_on(boxed::run(&args)),
    };
    // A server's connection tasks may outlive its duration while a client
    // stays connected; they hold nothing worth waiting for.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    if let Err(e) = result {
        eprintln!("d9-target: {e}");
        exit(1);
    }
}
