//! The soak run: 256 concurrent streams through `herma serve` (SQLite, receipts and memory on)
//! to a local mock, without pause, for `HERMA_SOAK_SECONDS` (default 600); it stops by itself.
//! Every stream must arrive whole (its last event `message_stop`); errors are counted. The
//! gateway's RSS and the database's size are sampled every `HERMA_SOAK_SAMPLE_SECONDS` (default
//! 60) and printed as a Markdown table, with the errors (must be 0). Loopback only.
//!
//! ```sh
//! cargo build --release -p herma-cli -p herma-bench
//! taskset -c 1 target/release/herma-soak     # Herma runs under `taskset -c 0`
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use herma_bench::{Result, memory_mib, run_cli, sibling, spawn_gateway};
use herma_mocks::mock_upstream::MockUpstream;
use serde_json::{Value, json};

const STREAMS: usize = 256;

fn seconds(name: &str, default: u64) -> u64 {
    #[allow(clippy::disallowed_methods)] // a developer tool configured by its environment
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let duration = Duration::from_secs(seconds("HERMA_SOAK_SECONDS", 600));
    let sample = Duration::from_secs(seconds("HERMA_SOAK_SAMPLE_SECONDS", 60).max(1));
    let herma = sibling("herma")?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let db_path = dir.path().join("soak.db");
    let database = format!("sqlite://{}", db_path.display());
    let key: Value = serde_json::from_str(&run_cli(
        &herma,
        &["keys", "create", "--scope", "route", "--json"],
        &database,
    )?)
    .map_err(|e| e.to_string())?;
    let key = key["key"].as_str().ok_or("no key")?.to_owned();
    let mock = MockUpstream::start_with(false).await;
    let gateway = spawn_gateway(
        &herma,
        &["serve", "--bind", "127.0.0.1:0"],
        &[
            ("HERMA_DATABASE_URL", database.clone()),
            ("HERMA_LOG", "warn,herma=info".into()),
            ("HERMA_UPSTREAM_BASE_URL", mock.url()),
        ],
    )?;
    let pid = gateway.pid();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(STREAMS)
        .build()
        .map_err(|e| e.to_string())?;
    let body = json!({"model": "claude-soak", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "Summarize the deploy checklist, please."}]});
    let (done, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let end = Instant::now() + duration;
    let mut workers = Vec::new();
    for _ in 0..STREAMS {
        let (client, base, key, body) = (
            client.clone(),
            gateway.base.clone(),
            key.clone(),
            body.clone(),
        );
        let (done, errors) = (done.clone(), errors.clone());
        workers.push(tokio::spawn(async move {
            while Instant::now() < end {
                let sent = client
                    .post(format!("{base}/v1/messages"))
                    .header("x-api-key", &key)
                    .header("anthropic-version", "2023-06-01")
                    .header("x-mock-chunks", "20")
                    .header("x-mock-gap-ms", "5")
                    .json(&body)
                    .send()
                    .await;
                let whole = match sent {
                    Ok(response) if response.status() == 200 => {
                        let mut tail = Vec::new();
                        let mut stream = response.bytes_stream();
                        let mut ok = true;
                        while let Some(chunk) = stream.next().await {
                            match chunk {
                                Ok(chunk) => {
                                    tail.extend_from_slice(&chunk);
                                    let keep = tail.len().saturating_sub(256);
                                    tail.drain(..keep);
                                }
                                Err(_) => ok = false,
                            }
                        }
                        ok && String::from_utf8_lossy(&tail).contains("message_stop")
                    }
                    _ => false,
                };
                if whole { &done } else { &errors }.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    println!(
        "### Soak: {STREAMS} concurrent streams for {} s through `herma serve` (SQLite, receipts and memory on)\n",
        duration.as_secs()
    );
    println!("| elapsed | streams completed | errors | Herma RSS | database |");
    println!("|---|---|---|---|---|");
    let start = Instant::now();
    let size = || {
        ["", "-wal"]
            .iter()
            .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", db_path.display())).ok())
            .map(|m| m.len())
            .sum::<u64>() as f64
            / (1024.0 * 1024.0)
    };
    let mut rss = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        tokio::time::sleep(sample.min(left)).await;
        let now_rss = memory_mib(pid, "VmRSS");
        rss.push(now_rss);
        println!(
            "| {} s | {} | {} | {now_rss:.1} MiB | {:.1} MiB |",
            start.elapsed().as_secs(),
            done.load(Ordering::Relaxed),
            errors.load(Ordering::Relaxed),
            size()
        );
        if Instant::now() >= end {
            break;
        }
    }
    for worker in workers {
        let _ = worker.await;
    }
    let first = rss.first().copied().unwrap_or(0.0);
    let max = rss.iter().copied().fold(0.0, f64::max);
    println!(
        "\n{} streams, {} errors; RSS first sample {first:.1} MiB, highest {max:.1} MiB, last {:.1} MiB; peak {:.1} MiB",
        done.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        rss.last().copied().unwrap_or(0.0),
        memory_mib(pid, "VmHWM")
    );
    drop(gateway);
    Ok(())
}
