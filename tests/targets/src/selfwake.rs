//! A task that wakes itself inside its own poll and then stays on CPU: every
//! 200 ms its poll calls its own waker, spins 30 ms (`spin_after_self_wake`)
//! and returns Pending; Tokio queues the task again only when that poll
//! returns, and the next poll follows at once. So the task waits in the
//! queue for microseconds, though its wake came 30 ms before its next poll
//! (npm postgrestools: a 4.7 s poll that woke itself at its start read as a
//! 4.7 s wake-to-poll delay). At exit one JSON line: pid, flavor, tokio,
//! duration_s, self_wakes.

use crate::args::Args;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{interval, Instant, MissedTickBehavior};

#[inline(never)]
fn spin_after_self_wake() -> u64 {
    let start = std::time::Instant::now();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    while start.elapsed() < Duration::from_millis(30) {
        for _ in 0..1000 {
            x = std::hint::black_box(x.rotate_left(7) ^ 0x9e37_79b9_7f4a_7c15);
        }
    }
    x
}

/// Pending once, after waking itself and spinning; Ready on the next poll.
struct WakeThenSpin {
    spun: bool,
}

impl Future for WakeThenSpin {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.spun {
            return Poll::Ready(());
        }
        self.spun = true;
        // By value: the plan skips wake_by_ref where its first instruction
        // would be single-stepped, and this wake must be in the trace.
        cx.waker().clone().wake();
        std::hint::black_box(spin_after_self_wake());
        Poll::Pending
    }
}

async fn self_waker(deadline: Instant) -> u64 {
    let mut iv = interval(Duration::from_millis(200));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut wakes = 0;
    while Instant::now() + Duration::from_millis(100) < deadline {
        iv.tick().await;
        WakeThenSpin { spun: false }.await;
        wakes += 1;
    }
    wakes
}

pub async fn run(args: &Args) -> Result<(), String> {
    crate::counted::run(args, "selfwake", "self_wakes", self_waker).await
}
