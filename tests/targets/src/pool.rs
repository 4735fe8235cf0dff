//! Built like a production service: every runtime thread (workers and the
//! blocking pool alike) named `tokio-rt-worker` by the caller, a steady
//! stream of `spawn_blocking` jobs so blocking threads come and go (a short
//! keep-alive), some of them 1-5 s long, next to worker tasks: a 50 ms busy
//! poll once per second and small spawn churn. A tracer must never show a
//! blocking job as a poll on a worker, nor count blocking threads as
//! workers. A task also blocks in place (`block_in_place`, 300 ms) every
//! 900 ms: Tokio hands that worker's core to another thread meanwhile, and
//! the worker must keep its id there. At exit it prints its own counts as
//! one JSON line.

use crate::args::Args;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{interval, sleep, Instant, MissedTickBehavior};

#[derive(Default)]
struct Truth {
    tasks_spawned: AtomicU64,
    busy_polls: AtomicU64,
    blocking_jobs: AtomicU64,
    long_jobs: AtomicU64,
    block_in_place: AtomicU64,
}

/// A job for the blocking pool: off-CPU for `ms` (as file or DNS work is).
#[inline(never)]
fn blocking_job(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

async fn busy_poller(truth: Arc<Truth>, deadline: Instant) {
    let mut iv = interval(Duration::from_secs(1));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while Instant::now() + Duration::from_millis(100) < deadline {
        iv.tick().await;
        std::hint::black_box(crate::mixed::busy_block_50ms());
        truth.busy_polls.fetch_add(1, Ordering::Relaxed);
    }
}

async fn blocks_in_place(truth: Arc<Truth>, deadline: Instant) {
    let mut iv = interval(Duration::from_millis(900));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while Instant::now() + Duration::from_millis(400) < deadline {
        iv.tick().await;
        tokio::task::block_in_place(|| blocking_job(300));
        truth.block_in_place.fetch_add(1, Ordering::Relaxed);
    }
}

async fn job_stream(truth: Arc<Truth>, deadline: Instant) {
    let mut n = 0u64;
    let mut pending = Vec::new();
    while Instant::now() < deadline {
        // Every 7th job is long: 1, 2, 3, 4, 5 s in turn; the others 5-20 ms.
        let ms = if n % 7 == 6 { 1000 * (1 + (n / 7) % 5) } else { 5 + (n * 3) % 16 };
        if ms >= 1000 {
            truth.long_jobs.fetch_add(1, Ordering::Relaxed);
        }
        truth.blocking_jobs.fetch_add(1, Ordering::Relaxed);
        pending.push(tokio::task::spawn_blocking(move || blocking_job(ms)));
        n += 1;
        sleep(Duration::from_millis(60)).await;
        pending.retain(|h: &tokio::task::JoinHandle<()>| !h.is_finished());
    }
    for h in pending {
        let _ = h.await;
    }
}

async fn churn(truth: Arc<Truth>, deadline: Instant) {
    while Instant::now() < deadline {
        let hs: Vec<_> = (0..8u64)
            .map(|i| {
                truth.tasks_spawned.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    tokio::task::yield_now().await;
                    std::hint::black_box(i)
                })
            })
            .collect();
        for h in hs {
            let _ = h.await;
        }
        sleep(Duration::from_millis(5)).await;
    }
}

pub async fn run(args: &Args) -> Result<(), String> {
    let duration = args.duration.unwrap_or(Duration::from_secs(3));
    let truth = Arc::new(Truth::default());
    let start = Instant::now();
    let deadline = start + duration;
    let t = &truth;
    truth.tasks_spawned.fetch_add(3, Ordering::Relaxed);
    let mut tasks = vec![
        tokio::spawn(busy_poller(t.clone(), deadline)),
        tokio::spawn(job_stream(t.clone(), deadline)),
        tokio::spawn(churn(t.clone(), deadline)),
    ];
    // block_in_place exists on the multi-thread runtime only.
    if args.flavor == crate::args::Flavor::MultiThread {
        truth.tasks_spawned.fetch_add(1, Ordering::Relaxed);
        tasks.push(tokio::spawn(blocks_in_place(t.clone(), deadline)));
    }
    let mut failed = 0;
    for h in tasks {
        if h.await.is_err() {
            failed += 1;
        }
    }
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "{{\"mode\":\"pool\",\"pid\":{},\"flavor\":\"{}\",\"workers\":{},\"tokio\":\"{}\",\"duration_s\":{:.3},\"tasks_spawned\":{},\"busy_polls\":{},\"blocking_jobs\":{},\"long_jobs\":{},\"block_in_place\":{},\"failed_tasks\":{}}}",
        std::process::id(),
        args.flavor.name(),
        if args.flavor == crate::args::Flavor::MultiThread { args.workers } else { 1 },
        crate::TOKIO_VERSION,
        start.elapsed().as_secs_f64(),
        n(&truth.tasks_spawned),
        n(&truth.busy_polls),
        n(&truth.blocking_jobs),
        n(&truth.long_jobs),
        n(&truth.block_in_place),
        failed
    );
    if failed > 0 {
        return Err(format!("pool: {failed} task(s) panicked"));
    }
    Ok(())
}
