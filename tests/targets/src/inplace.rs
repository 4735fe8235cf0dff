//! Built like a service whose database calls go through `block_in_place`
//! (deltachat's SQLite calls do): eight tasks call it all the time, for
//! short blocking work of varied length (0.2-8 ms, off-CPU sleeps and
//! on-CPU spins in turn), concurrently, so Tokio hands worker cores to
//! stand-in blocking-pool threads and back many times a second and those
//! threads come and go (a short keep-alive). Next to them: a 50 ms busy
//! poll once per second and small spawn churn. A tracer must list only the
//! configured workers, whichever thread holds a core, and never show the
//! blocked section as a poll on a worker that does not exist. At exit it
//! prints its own counts as one JSON line.

use crate::args::Args;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{interval, sleep, Instant, MissedTickBehavior};

#[derive(Default)]
struct Truth {
    tasks_spawned: AtomicU64,
    busy_polls: AtomicU64,
    block_in_place: AtomicU64,
    sleeping: AtomicU64,
    spinning: AtomicU64,
    blocked_us: AtomicU64,
}

/// The blocking work: off-CPU (a syscall, as SQLite waiting for a lock) or
/// on-CPU (as SQLite running a query) for `us` µs.
#[inline(never)]
fn blocking_work(us: u64, on_cpu: bool) {
    let d = Duration::from_micros(us);
    if !on_cpu {
        std::thread::sleep(d);
        return;
    }
    let start = std::time::Instant::now();
    let mut x: u64 = us;
    while start.elapsed() < d {
        x = std::hint::black_box(x.rotate_left(7) ^ 0x2545_f491_4f6c_dd1d);
    }
}

async fn caller(truth: Arc<Truth>, k: u64, deadline: Instant) {
    let mut n = k * 7;
    while Instant::now() < deadline {
        // 0.2 to 8 ms, a different length each call; every third on CPU.
        let us = 200 + (n * 1237) % 7800;
        let on_cpu = n % 3 == 0;
        let t0 = std::time::Instant::now();
        tokio::task::block_in_place(|| blocking_work(us, on_cpu));
        truth.blocked_us.fetch_add(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
        truth.block_in_place.fetch_add(1, Ordering::Relaxed);
        if on_cpu {
            truth.spinning.fetch_add(1, Ordering::Relaxed);
        } else {
            truth.sleeping.fetch_add(1, Ordering::Relaxed);
        }
        n += 1;
        sleep(Duration::from_micros(500 + (n * 311) % 4000)).await;
    }
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

async fn churn(truth: Arc<Truth>, deadline: Instant) {
    while Instant::now() < deadline {
        let hs: Vec<_> = (0..4u64)
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
        sleep(Duration::from_millis(10)).await;
    }
}

pub async fn run(args: &Args) -> Result<(), String> {
    if args.flavor != crate::args::Flavor::MultiThread {
        return Err("inplace: block_in_place needs the multi-thread runtime".into());
    }
    let duration = args.duration.unwrap_or(Duration::from_secs(3));
    let truth = Arc::new(Truth::default());
    let start = Instant::now();
    let deadline = start + duration;
    let t = &truth;
    let mut tasks = vec![tokio::spawn(busy_poller(t.clone(), deadline)), tokio::spawn(churn(t.clone(), deadline))];
    for k in 0..8 {
        tasks.push(tokio::spawn(caller(t.clone(), k, deadline)));
    }
    truth.tasks_spawned.fetch_add(tasks.len() as u64, Ordering::Relaxed);
    let mut failed = 0;
    for h in tasks {
        if h.await.is_err() {
            failed += 1;
        }
    }
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "{{\"mode\":\"inplace\",\"pid\":{},\"flavor\":\"multi-thread\",\"workers\":{},\"tokio\":\"{}\",\"duration_s\":{:.3},\"tasks_spawned\":{},\"busy_polls\":{},\"block_in_place\":{},\"sleeping\":{},\"spinning\":{},\"blocked_ms\":{},\"failed_tasks\":{}}}",
        std::process::id(),
        args.workers,
        crate::TOKIO_VERSION,
        start.elapsed().as_secs_f64(),
        n(&truth.tasks_spawned),
        n(&truth.busy_polls),
        n(&truth.block_in_place),
        n(&truth.sleeping),
        n(&truth.spinning),
        n(&truth.blocked_us) / 1000,
        failed
    );
    if failed > 0 {
        return Err(format!("inplace: {failed} task(s) panicked"));
    }
    Ok(())
}
