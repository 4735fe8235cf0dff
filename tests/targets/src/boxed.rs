//! Two tasks spawned as `Pin<Box<dyn Future>>`, each a different future
//! type: every 200 ms (100 ms apart) each spins 5 ms on CPU inside its own
//! poll (`spin_in_boxed_a`, `spin_in_boxed_b`). Both share one task poll
//! instance, the box's; only the concrete future's poll fn, reached
//! through the box's vtable, tells them apart (npm ace-tool-rs, stripped:
//! every default-set long poll said "unknown future"). At exit one JSON
//! line: pid, flavor, tokio, duration_s, spins_a, spins_b.

use crate::args::Args;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::time::{interval_at, Instant, MissedTickBehavior};

type Boxed = Pin<Box<dyn Future<Output = u64> + Send>>;

fn spin(ms: u64, seed: u64) -> u64 {
    let start = std::time::Instant::now();
    let mut x = seed;
    while start.elapsed() < Duration::from_millis(ms) {
        for _ in 0..1000 {
            x = std::hint::black_box(x.rotate_left(9) ^ 0x5851_f42d_4c95_7f2d);
        }
    }
    x
}

#[inline(never)]
fn spin_in_boxed_a() -> u64 {
    spin(5, 0x9e37_79b9_7f4a_7c15)
}

#[inline(never)]
fn spin_in_boxed_b() -> u64 {
    spin(5, 0x2545_f491_4f6c_dd1d)
}

fn spinner(offset_ms: u64, deadline: Instant, work: fn() -> u64) -> Boxed {
    Box::pin(async move {
        let mut iv = interval_at(Instant::now() + Duration::from_millis(offset_ms), Duration::from_millis(200));
        iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut n = 0;
        while Instant::now() + Duration::from_millis(100) < deadline {
            iv.tick().await;
            std::hint::black_box(work());
            n += 1;
        }
        n
    })
}

/// A second future type: the same loop, wrapped once more.
fn other_spinner(offset_ms: u64, deadline: Instant, work: fn() -> u64) -> Boxed {
    Box::pin(async move { spinner(offset_ms, deadline, work).await + 0 })
}

pub async fn run(args: &Args) -> Result<(), String> {
    let duration = args.duration.unwrap_or(Duration::from_secs(3));
    let deadline = Instant::now() + duration;
    let a = tokio::spawn(spinner(0, deadline, spin_in_boxed_a));
    let b = tokio::spawn(other_spinner(100, deadline, spin_in_boxed_b));
    let spins_a = a.await.map_err(|e| format!("boxed task a failed: {e}"))?;
    let spins_b = b.await.map_err(|e| format!("boxed task b failed: {e}"))?;
    println!(
        "{{\"mode\":\"boxed\",\"pid\":{},\"flavor\":\"{}\",\"tokio\":\"{}\",\"duration_s\":{:.3},\"spins_a\":{spins_a},\"spins_b\":{spins_b}}}",
        std::process::id(),
        args.flavor.name(),
        crate::TOKIO_VERSION,
        duration.as_secs_f64(),
    );
    Ok(())
}
