//! Load client for `server`: N keep-alive connections, each sending one
//! 64-byte request at a time until the duration ends. Prints throughput and
//! latency percentiles as one JSON line.
//!
//! Closed loop by default: a connection sends its next request when it has
//! the reply, so the server runs saturated and its tail latency is mostly
//! queueing. With --rate, each connection sends on a fixed schedule of its
//! share of the rate, and a request's latency counts from the moment it
//! was due (a late send is the server's delay too, not hidden by waiting).

use crate::args::Args;
use crate::server::MSG_LEN;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

extern "C" {
    #[link_name = "prctl"]
    fn libc_prctl(option: i32, arg: u64) -> i32;
}

#[derive(Default)]
struct ConnResult {
    latencies_us: Vec<u32>,
    errors: u64,
}

impl ConnResult {
    fn cannot_connect(addr: &str, e: std::io::Error) -> Self {
        eprintln!("d9-target: connect {addr}: {e}");
        ConnResult { latencies_us: Vec::new(), errors: 1 }
    }

    /// The reply to req (ok: sent and read), timed from `since`; false
    /// ends the connection's run.
    fn answered(&mut self, ok: bool, reply: &[u8], req: &[u8], since: Instant) -> bool {
        if !ok || reply[..8] != req[..8] {
            self.errors += 1;
            return false;
        }
        self.latencies_us.push(since.elapsed().as_micros().min(u32::MAX as u128) as u32);
        true
    }
}

async fn drive_connection(addr: String, deadline: Instant) -> ConnResult {
    let mut res = ConnResult::default();
    let mut sock = match TcpStream::connect(&addr).await {
        Ok(s) => s,
        Err(e) => return ConnResult::cannot_connect(&addr, e),
    };
    let _ = sock.set_nodelay(true);
    let mut req = [0u8; MSG_LEN];
    let mut reply = [0u8; MSG_LEN];
    let mut seq: u64 = 0;
    while Instant::now() < deadline {
        seq += 1;
        req[..8].copy_from_slice(&seq.to_le_bytes());
        let t0 = Instant::now();
        let ok = sock.write_all(&req).await.is_ok() && sock.read_exact(&mut reply).await.is_ok();
        if !res.answered(ok, &reply, &req, t0) {
            break;
        }
    }
    res
}

/// --rate: one thread per connection with a blocking socket, sleeping
/// (nanosleep, not Tokio's 1 ms timer) until each request is due, so the
/// schedule keeps sub-millisecond periods without spinning on the client's
/// CPU. A request sent late (the previous reply came after it was due)
/// still counts from when it was due.
fn drive_paced(addr: &str, deadline: Instant, period: Duration, offset: Duration) -> ConnResult {
    use std::io::{Read, Write};

    let mut res = ConnResult::default();
    let mut sock = match std::net::TcpStream::connect(addr) {
        Ok(s) => s,
        Err(e) => return ConnResult::cannot_connect(addr, e),
    };
    let _ = sock.set_nodelay(true);
    let mut req = [0u8; MSG_LEN];
    let mut reply = [0u8; MSG_LEN];
    let mut due = Instant::now() + offset;
    let mut seq: u64 = 0;
    while due < deadline {
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        seq += 1;
        req[..8].copy_from_slice(&seq.to_le_bytes());
        let ok = sock.write_all(&req).is_ok() && sock.read_exact(&mut reply).is_ok();
        if !res.answered(ok, &reply, &req, due) {
            break;
        }
        due += period;
    }
    res
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx]
}

pub async fn run(args: &Args) -> Result<(), String> {
    let duration = args.duration.unwrap_or(Duration::from_secs(3));
    let start = Instant::now();
    let deadline = start + duration;
    let mut all = Vec::new();
    let mut errors = 0u64;
    if args.rate > 0 {
        // Timer slack: nanosleep may otherwise wake up to 50 us late.
        unsafe { libc_prctl(29 /* PR_SET_TIMERSLACK */, 1) };
        let period = Duration::from_secs_f64(args.conns as f64 / args.rate as f64);
        let results: Vec<ConnResult> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..args.conns)
                .map(|i| {
                    // Connections spread over the period, not all due at once.
                    let offset = period.mul_f64(i as f64 / args.conns as f64);
                    let addr = args.connect.as_str();
                    s.spawn(move || drive_paced(addr, deadline, period, offset))
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap_or_default()).collect()
        });
        for r in results {
            all.extend_from_slice(&r.latencies_us);
            errors += r.errors;
        }
    } else {
        let mut handles = Vec::with_capacity(args.conns);
        for _ in 0..args.conns {
            handles.push(tokio::spawn(drive_connection(args.connect.clone(), deadline)));
        }
        for h in handles {
            let r = h.await.map_err(|e| format!("load: connection task failed: {e}"))?;
            all.extend_from_slice(&r.latencies_us);
            errors += r.errors;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    println!(
        "{{\"mode\":\"load\",\"pid\":{},\"flavor\":\"{}\",\"tokio\":\"{}\",\"conns\":{},\"rate\":{},\"requests\":{},\"errors\":{},\"elapsed_s\":{:.3},\"req_per_sec\":{:.1},\"p50_us\":{},\"p99_us\":{}}}",
        std::process::id(),
        args.flavor.name(),
        crate::TOKIO_VERSION,
        args.conns,
        args.rate,
        all.len(),
        errors,
        elapsed,
        all.len() as f64 / elapsed,
        percentile(&all, 0.50),
        percentile(&all, 0.99)
    );
    if all.is_empty() {
        return Err(format!("load: no request to {} succeeded", args.connect));
    }
    Ok(())
}
