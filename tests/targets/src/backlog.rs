//! `backlog`: a listener that does not accept until told to, so a test can
//! fill its accept queue; and some steady work (CPU, memory, blocking-pool
//! threads that come and go, writes) for the resource counters to show.
//!
//! Prints `listening ADDR` once bound with `--backlog N`; reads stdin lines:
//! `accept` starts accepting (each accepted connection is held open),
//! `quit` exits. Prints `accepted N` on each 10th connection accepted.

use crate::args::Args;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpSocket;

/// CPU and page faults on the workers, threads on the blocking pool.
async fn churn(stop: Arc<AtomicBool>) {
    let mut held: Vec<Vec<u8>> = Vec::new();
    let mut tick = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut x = tick;
        for i in 0..200_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        if held.len() < 64 {
            held.push(vec![1u8; 256 << 10]); // 16 MiB at most, touched
        }
        if tick % 5 == 0 {
            let _ = tokio::task::spawn_blocking(move || {
                let mut out = std::io::sink();
                let _ = out.write_all(&[0u8; 4096]);
                std::thread::sleep(std::time::Duration::from_millis(2));
            })
            .await;
        }
        tick += 1;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

pub async fn run(args: &Args) -> Result<(), String> {
    let addr: std::net::SocketAddr = args.listen.parse().map_err(|e| format!("backlog: --listen: {e}"))?;
    let sock = if addr.is_ipv6() { TcpSocket::new_v6() } else { TcpSocket::new_v4() }
        .map_err(|e| format!("backlog: socket: {e}"))?;
    sock.bind(addr).map_err(|e| format!("backlog: bind {addr}: {e}"))?;
    let listener = sock.listen(args.backlog).map_err(|e| format!("backlog: listen: {e}"))?;
    let local = listener.local_addr().map_err(|e| format!("backlog: {e}"))?;
    println!("listening {local}");
    let _ = std::io::stdout().flush();

    let stop = Arc::new(AtomicBool::new(false));
    tokio::spawn(churn(stop.clone()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(l.trim().to_string()).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
    // Not accepting: completed connections wait in the kernel's queue.
    loop {
        match rx.recv().await.as_deref() {
            Some("accept") => break,
            Some("quit") | None => return Ok(()),
            Some(_) => {}
        }
    }
    let accepted = Arc::new(AtomicU64::new(0));
    let mut held = Vec::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((c, _)) => {
                    held.push(c);
                    let n = accepted.fetch_add(1, Ordering::Relaxed) + 1;
                    if n % 10 == 0 {
                        println!("accepted {n}");
                        let _ = std::io::stdout().flush();
                    }
                }
                Err(e) => eprintln!("d9-target: accept: {e}"),
            },
            cmd = rx.recv() => if matches!(cmd.as_deref(), Some("quit") | None) { break },
        }
    }
    stop.store(true, Ordering::Relaxed);
    Ok(())
}
