//! The modes that run one task until their deadline and count what it did
//! (`deep`, `deeper`, `recurse`, `selfwake`): the task spawned and awaited,
//! then the mode's one JSON line: pid, flavor, tokio, duration_s and the
//! count under the mode's own key.

use crate::args::Args;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

pub async fn run<F>(args: &Args, mode: &str, key: &str, task: impl FnOnce(Instant) -> F) -> Result<(), String>
where
    F: Future<Output = u64> + Send + 'static,
{
    let duration = args.duration.unwrap_or(Duration::from_secs(3));
    let count = tokio::spawn(task(Instant::now() + duration)).await.map_err(|e| format!("{mode} task failed: {e}"))?;
    println!(
        "{{\"mode\":\"{mode}\",\"pid\":{},\"flavor\":\"{}\",\"tokio\":\"{}\",\"duration_s\":{:.3},\"{key}\":{count}}}",
        std::process::id(),
        args.flavor.name(),
        crate::TOKIO_VERSION,
        duration.as_secs_f64(),
    );
    Ok(())
}
