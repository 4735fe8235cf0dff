//! Several runtimes in one process, as big services run them: the runtime
//! the caller built (multi-thread, `--workers N`), a second multi-thread
//! runtime with 3 workers and a current-thread runtime driven by a thread
//! of its own. Every thread of all three is named by `--thread-name` alike
//! (restate names its workers `rs:worker-N`, others all `tokio-rt-worker`),
//! so only the runtime's structure can tell them apart. Each runs spawn
//! churn with short CPU bursts. At exit it prints, per runtime, its worker
//! count and the thread ids its tasks ran on, as one JSON line.

use crate::args::Args;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{sleep, Instant};

#[derive(Default)]
struct Seen {
    tids: Mutex<BTreeSet<u64>>,
    tasks: AtomicU64,
}

/// The calling thread's kernel thread id (std has no gettid).
fn tid() -> u64 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name().and_then(|n| n.to_str()).and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

#[inline(never)]
fn burst(us: u64) -> u64 {
    let end = std::time::Instant::now() + Duration::from_micros(us);
    let mut x = 0u64;
    while std::time::Instant::now() < end {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    x
}

async fn churn(seen: Arc<Seen>, deadline: Instant, width: u64) {
    while Instant::now() < deadline {
        let hs: Vec<_> = (0..width)
            .map(|i| {
                let seen = seen.clone();
                seen.tasks.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    seen.tids.lock().unwrap().insert(tid());
                    std::hint::black_box(burst(300 + 50 * i));
                    tokio::task::yield_now().await;
                    seen.tids.lock().unwrap().insert(tid());
                })
            })
            .collect();
        for h in hs {
            let _ = h.await;
        }
        sleep(Duration::from_millis(3)).await;
    }
}

fn builder_named(mut b: tokio::runtime::Builder, args: &Args) -> tokio::runtime::Builder {
    if let Some(name) = &args.thread_name {
        b.thread_name(name.clone());
    }
    b.enable_all();
    b
}

fn json(name: &str, workers: usize, seen: &Seen) -> String {
    let tids: Vec<String> = seen.tids.lock().unwrap().iter().map(|t| t.to_string()).collect();
    format!(
        "{{\"name\":\"{name}\",\"workers\":{workers},\"tasks\":{},\"tids\":[{}]}}",
        seen.tasks.load(Ordering::Relaxed),
        tids.join(",")
    )
}

pub async fn run(args: &Args) -> Result<(), String> {
    let duration = args.duration.unwrap_or(Duration::from_secs(3));
    let start = Instant::now();
    let deadline = start + duration;
    let (main_seen, io_seen, ct_seen) = (Arc::<Seen>::default(), Arc::<Seen>::default(), Arc::<Seen>::default());

    let mut io = tokio::runtime::Builder::new_multi_thread();
    io.worker_threads(3);
    let io = builder_named(io, args).build().map_err(|e| format!("io runtime: {e}"))?;
    let io_task = io.spawn(churn(io_seen.clone(), deadline, 6));

    let ct = builder_named(tokio::runtime::Builder::new_current_thread(), args)
        .build()
        .map_err(|e| format!("current-thread runtime: {e}"))?;
    let ct_thread = {
        let seen = ct_seen.clone();
        let mut t = std::thread::Builder::new();
        if let Some(name) = &args.thread_name {
            t = t.name(name.clone());
        }
        t.spawn(move || ct.block_on(churn(seen, deadline, 3)))
            .map_err(|e| format!("current-thread runtime's thread: {e}"))?
    };

    churn(main_seen.clone(), deadline, 4).await;
    let io_ok = io_task.await.is_ok();
    let ct_ok = ct_thread.join().is_ok();
    // Not shutdown_timeout: blocking is not allowed inside this async fn.
    io.shutdown_background();
    println!(
        "{{\"mode\":\"runtimes\",\"pid\":{},\"tokio\":\"{}\",\"duration_s\":{:.3},\"runtimes\":[{},{},{}]}}",
        std::process::id(),
        crate::TOKIO_VERSION,
        start.elapsed().as_secs_f64(),
        json("main", args.workers, &main_seen),
        json("io", 3, &io_seen),
        json("current", 1, &ct_seen)
    );
    if !io_ok || !ct_ok {
        return Err("runtimes: a runtime's workload panicked".into());
    }
    Ok(())
}
