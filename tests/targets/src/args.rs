//! Command-line parsing (std only, so the target needs no crate but Tokio).

use std::time::Duration;

pub const USAGE: &str = "usage: d9-target server|load|mixed|pool|inplace|runtimes|deep|deeper|deepsleep|recurse|selfwake|backlog|boxed [--flavor multi-thread|current-thread] \
[--workers N] [--thread-name NAME] [--listen ADDR] [--backlog N] [--connect ADDR] [--conns N] [--duration SECS] \
[--start-delay SECS] [--wait-stdin] [--work-us N] [--rate N] [--unpark-sleep-every N]";

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Server,
    Load,
    Mixed,
    Pool,
    Inplace,
    Runtimes,
    Deep,
    Deeper,
    DeepSleep,
    Recurse,
    SelfWake,
    Backlog,
    Boxed,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MultiThread,
    CurrentThread,
}

impl Flavor {
    pub fn name(self) -> &'static str {
        match self {
            Flavor::MultiThread => "multi-thread",
            Flavor::CurrentThread => "current-thread",
        }
    }
}

pub struct Args {
    pub mode: Mode,
    pub flavor: Flavor,
    pub workers: usize,
    /// Name of every runtime thread (workers and blocking pool), as
    /// `Builder::thread_name` sets it; None: Tokio's default.
    pub thread_name: Option<String>,
    pub listen: String,
    pub connect: String,
    pub conns: usize,
    /// None: run until killed (server only).
    pub duration: Option<Duration>,
    pub start_delay_ms: u64,
    pub wait_stdin: bool,
    /// backlog mode: the listen() backlog.
    pub backlog: u32,
    /// server: real work per request (parse, hash, a timer, sometimes a
    /// spawn_blocking), about this many µs; 0: a bare echo.
    pub work_us: u64,
    /// load: requests a second over all connections at a fixed schedule
    /// (open loop, latency from each request's planned send time); 0:
    /// each connection sends its next request as soon as it has a reply.
    pub rate: u64,
    /// Every Nth unpark of a worker, its `on_thread_unpark` hook sleeps
    /// 3 ms (a worker asleep in its loop, outside any poll, not parked);
    /// 0: never.
    pub unpark_sleep_every: u64,
}

fn parse_secs(flag: &str, v: &str) -> Result<Duration, String> {
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{flag}: expected seconds, got '{v}'")),
    }
}

fn parse_count(flag: &str, v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag}: expected a positive integer, got '{v}'")),
    }
}

pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mode = match it.next().as_deref() {
        Some("server") => Mode::Server,
        Some("load") => Mode::Load,
        Some("mixed") => Mode::Mixed,
        Some("pool") => Mode::Pool,
        Some("inplace") => Mode::Inplace,
        Some("runtimes") => Mode::Runtimes,
        Some("deep") => Mode::Deep,
        Some("deeper") => Mode::Deeper,
        Some("deepsleep") => Mode::DeepSleep,
        Some("recurse") => Mode::Recurse,
        Some("selfwake") => Mode::SelfWake,
        Some("backlog") => Mode::Backlog,
        Some("boxed") => Mode::Boxed,
        Some(m) => return Err(format!("unknown mode '{m}'")),
        None => return Err("missing mode".into()),
    };
    let mut a = Args {
        mode,
        flavor: Flavor::MultiThread,
        workers: 2,
        thread_name: None,
        listen: "127.0.0.1:0".into(),
        connect: String::new(),
        conns: 4,
        duration: None,
        start_delay_ms: 0,
        wait_stdin: false,
        backlog: 16,
        work_us: 0,
        rate: 0,
        unpark_sleep_every: 0,
    };
    while let Some(flag) = it.next() {
        if flag == "--wait-stdin" {
            a.wait_stdin = true;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{flag}: missing value"))?;
        match flag.as_str() {
            "--flavor" => {
                a.flavor = match v.as_str() {
                    "multi-thread" => Flavor::MultiThread,
                    "current-thread" => Flavor::CurrentThread,
                    _ => return Err(format!("--flavor: unknown flavor '{v}'")),
                }
            }
            "--workers" => a.workers = parse_count(&flag, &v)?,
            "--thread-name" => a.thread_name = Some(v),
            "--listen" => a.listen = v,
            "--connect" => a.connect = v,
            "--conns" => a.conns = parse_count(&flag, &v)?,
            "--backlog" => a.backlog = parse_count(&flag, &v)?.min(65535) as u32,
            "--duration" => a.duration = Some(parse_secs(&flag, &v)?),
            "--start-delay" => a.start_delay_ms = parse_secs(&flag, &v)?.as_millis() as u64,
            "--work-us" => a.work_us = parse_count(&flag, &v)? as u64,
            "--rate" => a.rate = parse_count(&flag, &v)? as u64,
            "--unpark-sleep-every" => a.unpark_sleep_every = parse_count(&flag, &v)? as u64,
            _ => return Err(format!("unknown option '{flag}'")),
        }
    }
    if a.mode == Mode::Load && a.connect.is_empty() {
        return Err("load: --connect ADDR is required".into());
    }
    if a.mode != Mode::Server && a.mode != Mode::Backlog && a.duration.is_none() {
        a.duration = Some(Duration::from_secs(3));
    }
    Ok(a)
}
