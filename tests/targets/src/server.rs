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

async fn serve_connection(mut sock: TcpStream, stats: Arc<Stats>) {
    let _ = sock.set_nodelay(true);
    let mut req = [0u8; MSG_LEN];
    let mut reply = [0u8; MSG_LEN];
    // A short read or a reset ends the connection; the client counts errors.
    while sock.read_exact(&mut req).await.is_ok() {
        make_reply(&req, &mut reply);
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
