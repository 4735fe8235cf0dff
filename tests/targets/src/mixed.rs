//! Mixed workload with known truth: spawn churn, channel ping-pong, timers,
//! a task that blocks its worker with a 50 ms busy loop once per second, a
//! task that blocks in a 20 ms thread sleep once per second, and tasks
//! spawned as type-erased boxed futures (as hyper/tower services do). At exit
//! it prints its own counts as one JSON line.

use crate::args::Args;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{interval, interval_at, sleep, timeout_at, Instant, MissedTickBehavior};

#[derive(Default)]
struct Truth {
    tasks_spawned: AtomicU64,
    boxed_tasks: AtomicU64,
    /// Each busy loop's own wall time (their count is blocking_polls): it
    /// ends at its first clock check past 50 ms, so time the thread did not
    /// run across that mark (preemption, or the hypervisor running another
    /// vCPU, which no sched_switch shows) makes it, and the poll around it,
    /// longer.
    busy_spin_us: Mutex<Vec<u64>>,
    sleep_polls: AtomicU64,
    round_trips: AtomicU64,
    timers_fired: AtomicU64,
}

type BoxedTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Every spawn goes through here so `tasks_spawned` is exact.
fn spawn_counted<F>(truth: &Truth, fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    truth.tasks_spawned.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(fut)
}

/// Holds the worker thread for 50 ms without yielding: the long poll a
/// tracer must attribute to this task and to this function.
#[inline(never)]
pub fn busy_block_50ms() -> u64 {
    let start = std::time::Instant::now();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while start.elapsed() < Duration::from_millis(50) {
        for _ in 0..1000 {
            x = std::hint::black_box(x.rotate_left(5) ^ 0x5851_f42d_4c95_7f2d);
        }
    }
    x
}

/// Blocks the worker off-CPU for 20 ms (a blocking syscall inside a poll).
#[inline(never)]
pub fn sleep_block_20ms() {
    std::thread::sleep(Duration::from_millis(20));
}

async fn churn(truth: Arc<Truth>, deadline: Instant) {
    let mut batch = Vec::with_capacity(32);
    while Instant::now() < deadline {
        for i in 0..32u64 {
            batch.push(spawn_counted(&truth, async move {
                tokio::task::yield_now().await;
                std::hint::black_box(i.wrapping_mul(31))
            }));
        }
        for h in batch.drain(..) {
            let _ = h.await;
        }
        sleep(Duration::from_millis(2)).await;
    }
}

async fn ping_pong(truth: Arc<Truth>, deadline: Instant) {
    let (to_pong, mut pong_rx) = mpsc::channel::<u64>(1);
    let (to_ping, mut ping_rx) = mpsc::channel::<u64>(1);
    let ponger = spawn_counted(&truth, async move {
        while let Some(v) = pong_rx.recv().await {
            if to_ping.send(v + 1).await.is_err() {
                break;
            }
        }
    });
    let mut v = 0u64;
    'outer: while Instant::now() < deadline {
        // Bursts with a pause keep the workload from eating a whole core.
        for _ in 0..64 {
            if to_pong.send(v).await.is_err() {
                break 'outer;
            }
            match ping_rx.recv().await {
                Some(r) if r == v + 1 => v = r,
                _ => break 'outer,
            }
            truth.round_trips.fetch_add(1, Ordering::Relaxed);
        }
        sleep(Duration::from_millis(1)).await;
    }
    drop(to_pong);
    let _ = ponger.await;
}

async fn ticker(truth: Arc<Truth>, deadline: Instant) {
    let mut iv = interval(Duration::from_millis(10));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while Instant::now() < deadline {
        iv.tick().await;
        truth.timers_fired.fetch_add(1, Ordering::Relaxed);
    }
}

async fn sleeper(truth: Arc<Truth>, deadline: Instant) {
    while Instant::now() < deadline {
        sleep(Duration::from_millis(5)).await;
        truth.timers_fired.fetch_add(1, Ordering::Relaxed);
    }
}

async fn blocker(truth: Arc<Truth>, deadline: Instant) {
    let mut iv = interval(Duration::from_secs(1));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Stop 100 ms early so a tick due right at the deadline never races it:
    // a run of D seconds does exactly ceil(D - 0.1) of these.
    while timeout_at(deadline - Duration::from_millis(100), iv.tick()).await.is_ok() {
        let spin = std::time::Instant::now();
        std::hint::black_box(busy_block_50ms());
        truth.busy_spin_us.lock().unwrap().push(spin.elapsed().as_micros() as u64);
    }
}

async fn thread_sleeper(truth: Arc<Truth>, deadline: Instant) {
    // Half a second out of phase with the busy loop so the two never overlap.
    let mut iv = interval_at(Instant::now() + Duration::from_millis(500), Duration::from_secs(1));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Stop 100 ms early so a tick due right at the deadline never races it:
    // a run of D seconds does exactly ceil(D - 0.1) of these.
    while timeout_at(deadline - Duration::from_millis(100), iv.tick()).await.is_ok() {
        sleep_block_20ms();
        truth.sleep_polls.fetch_add(1, Ordering::Relaxed);
    }
}

/// A few differently-shaped futures behind one erased type.
fn boxed_batch(seq: u64) -> Vec<BoxedTask> {
    let (tx, mut rx) = mpsc::channel::<u64>(1);
    vec![
        Box::pin(async move {
            sleep(Duration::from_millis(3)).await;
        }),
        Box::pin(async move {
            let _ = tx.send(seq).await;
        }),
        Box::pin(async move {
            std::hint::black_box(rx.recv().await);
        }),
        Box::pin(async move {
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
        }),
    ]
}

async fn boxed_spawner(truth: Arc<Truth>, deadline: Instant) {
    let mut seq = 0u64;
    while Instant::now() < deadline {
        let handles: Vec<_> = boxed_batch(seq)
            .into_iter()
            .map(|task| {
                truth.boxed_tasks.fetch_add(1, Ordering::Relaxed);
                spawn_counted(&truth, task)
            })
            .collect();
        for h in handles {
            let _ = h.await;
        }
        seq += 1;
        sleep(Duration::from_millis(50)).await;
    }
}

pub async fn run(args: &Args) -> Result<(), String> {
    let duration = args.duration.unwrap_or(Duration::from_secs(3));
    let truth = Arc::new(Truth::default());
    let start = Instant::now();
    let deadline = start + duration;
    let t = &truth;
    let workers = vec![
        spawn_counted(t, churn(t.clone(), deadline)),
        spawn_counted(t, ping_pong(t.clone(), deadline)),
        spawn_counted(t, ticker(t.clone(), deadline)),
        spawn_counted(t, sleeper(t.clone(), deadline)),
        spawn_counted(t, blocker(t.clone(), deadline)),
        spawn_counted(t, thread_sleeper(t.clone(), deadline)),
        spawn_counted(t, boxed_spawner(t.clone(), deadline)),
    ];
    let mut failed = 0;
    for w in workers {
        if w.await.is_err() {
            failed += 1;
        }
    }
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let spins = truth.busy_spin_us.lock().unwrap();
    println!(
        "{{\"mode\":\"mixed\",\"pid\":{},\"flavor\":\"{}\",\"workers\":{},\"tokio\":\"{}\",\"duration_s\":{:.3},\"tasks_spawned\":{},\"boxed_tasks\":{},\"blocking_polls\":{},\"busy_spin_us\":{:?},\"sleep_polls\":{},\"round_trips\":{},\"timers_fired\":{},\"failed_tasks\":{}}}",
        std::process::id(),
        args.flavor.name(),
        if args.flavor == crate::args::Flavor::MultiThread { args.workers } else { 1 },
        crate::TOKIO_VERSION,
        start.elapsed().as_secs_f64(),
        n(&truth.tasks_spawned),
        n(&truth.boxed_tasks),
        spins.len(),
        *spins,
        n(&truth.sleep_polls),
        n(&truth.round_trips),
        n(&truth.timers_fired),
        failed
    );
    if failed > 0 {
        return Err(format!("mixed: {failed} workload task(s) panicked"));
    }
    Ok(())
}
