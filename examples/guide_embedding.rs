//! The user guide's embedding snippets (docs/src/embedding.md, docs/src/locks.md),
//! compiled with every `cargo build --examples` so that none can drift
//! from the library. Each snippet sits between `// ANCHOR: name` and
//! `// ANCHOR_END: name` markers, which the guide includes by name.
//!
//! Runnable against any Redis that no other cluster uses with the `guide`
//! key prefix: it starts a scheduler with one job every 2 s, takes a
//! cluster lock once, and stops after 10 s.
//!
//! ```sh
//! redis-server --port 6399 &
//! cargo run --example guide_embedding -- redis://127.0.0.1:6399/0
//! ```

use std::path::Path;
use std::time::Duration;

use cronlease::{Cluster, JobBuilder, RedisSettings, Run, Stop};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379/0".to_string());
    install_logging();
    let state_dir = std::env::temp_dir().join("cronlease-guide-embedding");
    // ANCHOR: scheduler
    let cluster = Cluster::connect(RedisSettings::url(&url).key_prefix("guide")).await?;
    let mut scheduler = cluster
        .scheduler()
        .replica_id("shop-1") // default <host>-<pid>-<4 hex>
        .state_dir(&state_dir)
        .job(
            JobBuilder::new("lottery-draw", "*/2 * * * * *")
                .timezone("Asia/Shanghai")
                .timeout(Duration::from_secs(300))
                .run(|run: Run| async move { draw_winners(run).await }),
        )
        .start()?;
    // Joined, or why it refused (e.g. Redis may evict keys).
    scheduler.ready().await?;
    // ANCHOR_END: scheduler
    scheduler.add(JobBuilder::new("import", "0 2 * * *").run(import))?;
    // ANCHOR: add_remove
    scheduler.add(JobBuilder::new("report", "H * * * *").run(report))?;
    println!("jobs: {:?}", scheduler.jobs());
    scheduler.remove("report")?;
    // ANCHOR_END: add_remove
    nightly_migration(&cluster).await?;
    lock_variants(&cluster).await?;
    front_page(&url, &state_dir.join("front-page")).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    // ANCHOR: shutdown
    // Drains within shutdown_grace + kill_grace.
    scheduler.shutdown().await?;
    // ANCHOR_END: shutdown
    Ok(())
}

// ANCHOR: handler
/// The draw: every write carries the run's fence, and the handler stops
/// writing once the run is told to stop.
async fn draw_winners(mut run: Run) -> Result<(), Error> {
    println!(
        "drawing tick {} on {} with fence {}",
        run.tick(),
        run.replica(),
        run.fence()
    );
    tokio::select! {
        written = write_winners(run.fence(), run.tick().as_millisecond()) => written,
        reason = run.stopped() => match reason {
            // Another instance may run this tick now: write nothing more.
            Stop::LostLease => Err("lease lost before the winners were written".into()),
            other => Err(format!("stopped: {other:?}").into()),
        },
    }
}
// ANCHOR_END: handler

/// Stands for the fenced write of the winners (see `examples/embedded_lottery.rs`
/// for a real one: a Lua script that refuses a fence lower than the highest seen).
async fn write_winners(fence: u64, tick_ms: i64) -> Result<(), Error> {
    let _ = (fence, tick_ms);
    Ok(())
}

/// The README's snippet, whole.
async fn front_page(url: &str, state_dir: &Path) -> Result<(), Error> {
    // ANCHOR: readme
    let cluster = Cluster::connect(RedisSettings::url(url).key_prefix("shop")).await?;
    let mut scheduler = cluster
        .scheduler()
        .state_dir(state_dir) // outcomes Redis could not take wait here
        .job(
            JobBuilder::new("lottery-draw", "0 12 * * *")
                .timezone("Asia/Shanghai")
                .run(|run: Run| async move { draw(run.fence(), run.tick()).await }),
        )
        .start()?;
    scheduler.ready().await?; // joined, or why it refused (e.g. Redis may evict keys)
    let guard = cluster.lock("nightly-migration").acquire().await?; // a cluster lock, fenced
    // ANCHOR_END: readme
    guard.release().await?;
    scheduler.shutdown().await?;
    Ok(())
}

async fn draw(fence: u64, tick: jiff::Timestamp) -> Result<(), Error> {
    println!("draw of {tick} under fence {fence}");
    Ok(())
}

async fn report(_run: Run) -> Result<(), Error> {
    Ok(())
}

// ANCHOR: lock
async fn nightly_migration(cluster: &Cluster) -> Result<(), Error> {
    let guard = cluster
        .lock("nightly-migration")
        .lease(Duration::from_secs(30))
        .acquire()
        .await?;
    tokio::select! {
        migrated = migrate(guard.fence()) => migrated?,
        () = guard.lost() => return Err("lock lost".into()),
    }
    guard.release().await?;
    Ok(())
}
// ANCHOR_END: lock

// ANCHOR: lock_variants
async fn lock_variants(cluster: &Cluster) -> Result<(), Error> {
    // Gives up at once when someone else holds it.
    if let Some(guard) = cluster.lock("report").try_acquire().await? {
        guard.release().await?;
    }
    // Waits up to a minute.
    if let Some(guard) = cluster
        .lock("report")
        .acquire_within(Duration::from_secs(60))
        .await?
    {
        guard.release().await?;
    }
    // Reentrant under one owner: the second acquisition succeeds at once,
    // with the same fence; the lock is free after as many releases.
    let outer = cluster
        .lock("settlement")
        .owner("settlement-2031")
        .acquire()
        .await?;
    let inner = cluster
        .lock("settlement")
        .owner("settlement-2031")
        .acquire()
        .await?;
    assert_eq!(outer.fence(), inner.fence());
    inner.release().await?;
    outer.release().await?;
    // Who holds it (None when free).
    if let Some(holder) = cluster.lock("report").info().await? {
        println!("report is held: {holder:?}");
    }
    Ok(())
}
// ANCHOR_END: lock_variants

async fn migrate(fence: u64) -> Result<(), Error> {
    let _ = fence;
    Ok(())
}

// ANCHOR: live_output
/// An import that shows its progress while it runs: `cronlease logs
/// import --follow` and the dashboard's job page print these lines.
async fn import(run: Run) -> Result<(), Error> {
    use std::io::Write;
    let mut out = run.output();
    for batch in 1..=3 {
        import_batch(batch, run.fence()).await?;
        writeln!(out, "imported batch {batch} of 3")?;
    }
    Ok(())
}
// ANCHOR_END: live_output

// ANCHOR: live_tracing
/// The service's own subscriber: its log lines as before, and each
/// handler's events at INFO and above in its run's live output too.
fn install_logging() {
    use tracing_subscriber::prelude::*;
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer())
        .with(cronlease::LiveOutputLayer::new())
        .init();
}
// ANCHOR_END: live_tracing

async fn import_batch(batch: u32, fence: u64) -> Result<(), Error> {
    let _ = (batch, fence);
    Ok(())
}
