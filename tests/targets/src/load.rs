//! Load client for `server`: N keep-alive connections, each sending one
//! 64-byte request at a time until the duration ends. Prints throughput and
//! latency percentiles as one JSON line.

use crate::args::Args;
use crate::server::MSG_LEN;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Default)]
struct ConnResult {
    latencies_us: Vec<u32>,
    errors: u64,
}

async fn drive_connection(addr: String, deadline: Instant) -> ConnResult {
    let mut res = ConnResult::default();
    let mut sock = match TcpStream::connect(&addr).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("d9-target: connect {addr}: {e}");
            res.errors += 1;
            return res;
        }
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
        if !ok || reply[..8] != req[..8] {
            res.errors += 1;
            break;
        }
        res.latencies_us.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
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
    let mut handles = Vec::with_capacity(args.conns);
    for _ in 0..args.conns {
        handles.push(tokio::spawn(drive_connection(args.connect.clone(), deadline)));
    }
    let mut all = Vec::new();
    let mut errors = 0u64;
    for h in handles {
        let r = h.await.map_err(|e| format!("load: connection task failed: {e}"))?;
        all.extend_from_slice(&r.latencies_us);
        errors += r.errors;
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    println!(
        "{{\"mode\":\"load\",\"pid\":{},\"flavor\":\"{}\",\"tokio\":\"{}\",\"conns\":{},\"requests\":{},\"errors\":{},\"elapsed_s\":{:.3},\"req_per_sec\":{:.1},\"p50_us\":{},\"p99_us\":{}}}",
        std::process::id(),
        args.flavor.name(),
        crate::TOKIO_VERSION,
        args.conns,
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
