//! A poll with a deep stack frame: every 200 ms a task's poll puts a 12 KiB
//! buffer on its own stack frame and spends 50 ms on CPU under it
//! (`busy_block_50ms`). A stack copy of 8 KiB from the sampled sp ends
//! inside that buffer, before the poll frame's return address: only an
//! unwinder that reaches past the copy (frame pointers, D9_STACK_FP_TAIL)
//! gets from the busy loop to the poll frame and out to `main`. Meant for
//! the frame-pointer build without .eh_frame (build-target's `fp`
//! variant), in the current-thread flavour so the poll runs under `main`.
//! At exit one JSON line: pid, flavor, tokio, duration_s, deep_polls.
//!
//! `deeper`: the same poll, but the busy loop runs under 12 nested calls of
//! `deeper_nest` with a 6 KiB frame each (72 KiB, plus the 12 KiB frame:
//! 84 KiB of user stack between the busy loop and the poll frame), as a
//! real server's request poll is deep (26-122 KiB, docs/stacks.md): a copy
//! reaches the poll frame only if it adapts to the stack's depth.

use crate::args::Args;
use std::time::Duration;
use tokio::time::{interval, Instant, MissedTickBehavior};

async fn deep_poller(deadline: Instant) -> u64 {
    let mut iv = interval(Duration::from_millis(200));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut polls = 0;
    while Instant::now() + Duration::from_millis(100) < deadline {
        iv.tick().await;
        // Not held across an await: on this poll's own stack frame.
        let mut frame = [0u8; 12 * 1024];
        std::hint::black_box(&mut frame);
        std::hint::black_box(crate::mixed::busy_block_50ms());
        std::hint::black_box(&frame);
        polls += 1;
    }
    polls
}

pub async fn run(args: &Args) -> Result<(), String> {
    crate::counted::run(args, "deep", "deep_polls", deep_poller).await
}

/// One level of `deeper`'s nesting: a 6 KiB frame of its own, used after
/// the call so neither the buffer nor the call can be optimised away.
#[inline(never)]
fn deeper_nest(level: u32) -> u64 {
    let mut frame = [0u8; 6 * 1024];
    std::hint::black_box(&mut frame);
    let r = if level == 0 {
        std::hint::black_box(crate::mixed::busy_block_50ms());
        1
    } else {
        deeper_nest(std::hint::black_box(level - 1))
    };
    std::hint::black_box(&frame);
    r + frame[level as usize] as u64
}

async fn deeper_poller(deadline: Instant) -> u64 {
    let mut iv = interval(Duration::from_millis(200));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut polls = 0;
    while Instant::now() + Duration::from_millis(100) < deadline {
        iv.tick().await;
        let mut frame = [0u8; 12 * 1024];
        std::hint::black_box(&mut frame);
        polls += std::hint::black_box(deeper_nest(11));
        std::hint::black_box(&frame);
    }
    polls
}

pub async fn run_deeper(args: &Args) -> Result<(), String> {
    crate::counted::run(args, "deeper", "deep_polls", deeper_poller).await
}

/// `deepsleep`'s sleep inside a poll: 5 ms off CPU (a poll blocking its
/// worker, as a synchronous lock or file read does). Not a tail call, so
/// its frame is on the stack.
#[inline(never)]
fn sleep_5ms() -> u64 {
    std::thread::sleep(Duration::from_millis(5));
    std::hint::black_box(1)
}

/// Every sleep goes through here: the stacks' innermost user frames (libc's
/// clock_nanosleep, std's sleep, sleep_5ms, this) are the same whoever
/// calls it.
#[inline(never)]
fn sleep_in_poll() -> u64 {
    std::hint::black_box(sleep_5ms()) + 1
}

/// The same sleep under a 12 KiB frame of its own: a stack copy of 8 KiB
/// from the sleep's sp ends inside the buffer, before the poll frame.
#[inline(never)]
fn sleep_under_12k() -> u64 {
    let mut frame = [0u8; 12 * 1024];
    std::hint::black_box(&mut frame);
    let r = sleep_in_poll();
    std::hint::black_box(&frame);
    r
}

/// `deepsleep`: every 50 ms a poll sleeps 5 ms, alternately straight from
/// the poll and under `sleep_under_12k`: the same innermost frames, one
/// stack whole in 8 KiB and one not (a server's sleeps inside deep request
/// polls, npm pact's cut by the deep copies' byte rate, read as parks).
async fn deep_sleeper(deadline: Instant) -> u64 {
    let mut iv = interval(Duration::from_millis(50));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut sleeps = 0;
    while Instant::now() + Duration::from_millis(60) < deadline {
        iv.tick().await;
        let r = if sleeps % 2 == 0 { sleep_in_poll() } else { sleep_under_12k() };
        sleeps += std::hint::black_box(r) - 1;
    }
    sleeps
}

pub async fn run_sleep(args: &Args) -> Result<(), String> {
    crate::counted::run(args, "deepsleep", "sleeps", deep_sleeper).await
}

/// One level of `recurse`: a small frame of its own, used after the call.
#[inline(never)]
fn recurse_nest(level: u32) -> u64 {
    let mut frame = [0u8; 48];
    std::hint::black_box(&mut frame);
    let r = if level == 0 {
        std::hint::black_box(crate::mixed::busy_block_50ms())
    } else {
        recurse_nest(std::hint::black_box(level - 1))
    };
    std::hint::black_box(&frame);
    r + frame[(level % 48) as usize] as u64
}

async fn recurse_poller(deadline: Instant) -> u64 {
    let mut iv = interval(Duration::from_millis(200));
    iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut polls = 0;
    while Instant::now() + Duration::from_millis(100) < deadline {
        iv.tick().await;
        polls += std::hint::black_box(recurse_nest(199)) & 1 | 1;
    }
    polls
}

/// `recurse`: every 200 ms a poll spends 50 ms on CPU 200 calls deep in
/// `recurse_nest` (a recursive-descent parser's shape: npm postgrestools
/// showed 128 frames of one function), more frames than d9d unwinds.
pub async fn run_recurse(args: &Args) -> Result<(), String> {
    crate::counted::run(args, "recurse", "deep_polls", recurse_poller).await
}
