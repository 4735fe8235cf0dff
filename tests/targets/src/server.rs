//! TCP request/response server: each 64-byte request gets a 64-byte reply on
//! the same keep-alive connection, one task per connection.

use crate::args::Args;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const MSG_LEN: usize = 64;

#[derive(Default)]
struct Stats {
    connections: AtomicU64,
    requests: AtomicU64,
}

/// The reply echoes the request's sequence number (first 8 bytes) so the
/// client can check it got the answer to its own question.
fn make_reply(req: &[u8; MSG_LEN], reply: &mut [u8; MSG_LEN]) {
    reply.fill(0x5a);
    reply[..8].copy_from_slice(&req[..8]);
}

/// Hash rounds per request for `--work-us`, calibrated once at start.
static ROUNDS: AtomicU64 = AtomicU64::new(0);

/// The request's "parsing and hashing": its words decoded, then a 1 KiB
/// buffer derived from them hashed `rounds` times. Returns the digest.
#[inline(never)]
fn request_work(req: &[u8; MSG_LEN], rounds: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut words = [0u64; MSG_LEN / 8];
    for (i, w) in words.iter_mut().enumerate() {
        *w = u64::from_le_bytes(req[i * 8..i * 8 + 8].try_into().unwrap());
    }
    let mut buf = [0u8; 1024];
    let mut digest = words.iter().fold(0u64, |a, w| a.rotate_left(7) ^ w);
    for r in 0..rounds {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (digest >> ((i % 8) * 8)) as u8 ^ i as u8;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        buf.hash(&mut h);
        r.hash(&mut h);
        digest = h.finish();
    }
    digest
}

/// Rounds that take about `us` µs on this machine.
pub fn calibrate(us: u64) {
    let req = [7u8; MSG_LEN];
    let t = std::time::Instant::now();
    let mut n = 0u64;
    while t.elapsed().as_micros() < 20_000 {
        std::hint::black_box(request_work(&req, 16));
        n += 16;
    }
    let per_round_ns = 20_000_000.0 / n as f64;
    ROUNDS.store(((us * 1000) as f64 / per_round_ns).max(1.0) as u64, Ordering::Relaxed);
}

/// `--work-us`: the work, a timer on every 8th request, and a spawn_blocking
/// on every 64th (its result awaited), as a real request handler has.
async fn handle(req: &[u8; MSG_LEN], n: u64) -> u64 {
    let rounds = ROUNDS.load(Ordering::Relaxed);
    if rounds == 0 {
        return 0;
    }
    let mut digest = request_work(req, rounds / 2);
    if n % 8 == 0 {
        tokio::time::sleep(std::time::Duration::from_micros(20)).await;
    }
    if n % 64 == 0 {
        let r = *req;
        digest ^= tokio::task::spawn_blocking(move || request_work(&r, 4)).await.unwrap_or(0);
    }
    digest ^ request_work(req, rounds - rounds / 2)
}

async fn serve_connection(mut sock: TcpStream, stats: Arc<Stats>) {
    let _ = sock.set_nodelay(true);
    let mut req = [0u8; MSG_LEN];
    let mut reply = [0u8; MSG_LEN];
    let mut n = 0u64;
    // A short read or a reset ends the connection; the client counts errors.
    while sock.read_exact(&mut req).await.is_ok() {
        let digest = handle(&req, n).await;
        n += 1;
        make_reply(&req, &mut reply);
        reply[8..16].copy_from_slice(&digest.to_le_bytes());
        if sock.write_all(&reply).await.is_err() {
            break;
        }
        stats.requests.fetch_add(1, Ordering::Relaxed);
    }
}

async fn accept_loop(listener: TcpListener, stats: Arc<Stats>) {
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                stats.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve_connection(sock, stats.clone()));
            }
            Err(e) => eprintln!("d9-target: accept: {e}"),
        }
    }
}

pub async fn run(args: &Args) -> Result<(), String> {
    if args.work_us > 0 {
        calibrate(args.work_us);
    }
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("server: cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| format!("server: {e}"))?;
    // Tests wait for this line before starting the client.
    println!("listening {addr}");
    let _ = std::io::stdout().flush();

    let stats = Arc::new(Stats::default());
    let acceptor = tokio::spawn(accept_loop(listener, stats.clone()));
    match args.duration {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending::<()>().await,
    }
    acceptor.abort();
    println!(
        "{{\"mode\":\"server\",\"pid\":{},\"flavor\":\"{}\",\"tokio\":\"{}\",\"connections\":{},\"requests\":{}}}",
        std::process::id(),
        args.flavor.name(),
        crate::TOKIO_VERSION,
        stats.connections.load(Ordering::Relaxed),
        stats.requests.load(Ordering::Relaxed)
    );
    Ok(())
}
