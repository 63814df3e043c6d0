//! The load harness. Measures Herma against the same requests sent straight to a local mock
//! upstream and through a bare pass-through proxy built on Herma's own HTTP stack, and prints a
//! Markdown report: added latency p50/p99 at concurrency 1, throughput at concurrency 32, CPU
//! time of the gateway process per request, time to the first streamed event, and RSS idle and
//! under 256 concurrent streams.
//!
//! Run it pinned to one core while the gateways it starts are pinned to the other:
//!
//! ```sh
//! cargo build --release -p herma-cli -p herma-bench
//! taskset -c 1 target/release/herma-load            # gateways run under `taskset -c 0`
//! ```
//!
//! `HERMA_LOAD_HERMA=PATH` runs another `herma` binary under this harness (to compare two
//! builds). With `HERMA_LOAD_PERF=DIR` it also `perf record`s each gateway's concurrency-32
//! phase into `DIR/passthrough.data` and `DIR/herma.data` (and Herma's with entity memory off
//! into `DIR/herma-memory-off.data`, its direct answers into `DIR/herma-direct.data`), and its
//! 200-chunk streams into `DIR/passthrough-streams.data` and `DIR/herma-streams.data`, and the
//! forwarded requests at concurrency 1 into `DIR/passthrough-c1.data` and `DIR/herma-c1.data`
//! (`scripts/perf-breakdown` reads them).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use herma_mocks::mock_upstream::MockUpstream;
use serde_json::{Value, json};

use herma_bench::{Result, cpu_ns, memory_mib, run_cli, sibling, spawn_gateway, taskset_available};

/// How many requests and how long, from `HERMA_LOAD_SCALE` (1 = the published run).
struct Plan {
    latency_requests: usize,
    throughput_seconds: u64,
    stream_requests: usize,
}

impl Plan {
    fn from_env() -> Self {
        #[allow(clippy::disallowed_methods)] // a developer tool configured by its environment
        let scale: f64 = std::env::var("HERMA_LOAD_SCALE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1.0);
        Plan {
            latency_requests: ((3000.0 * scale) as usize).max(50),
            throughput_seconds: ((5.0 * scale) as u64).max(1),
            stream_requests: ((300.0 * scale) as usize).max(20),
        }
    }
}

#[derive(Clone)]
struct Target {
    name: &'static str,
    base: String,
    headers: Vec<(&'static str, String)>,
    pid: Option<u32>,
}

impl Target {
    fn request(
        &self,
        client: &reqwest::Client,
        body: &Value,
        extra: &[(&'static str, &'static str)],
    ) -> reqwest::RequestBuilder {
        let mut r = client
            .post(format!("{}/v1/chat/completions", self.base))
            .json(body);
        for (k, v) in &self.headers {
            r = r.header(*k, v);
        }
        for (k, v) in extra {
            r = r.header(*k, *v);
        }
        r
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Latency {
    p50: Duration,
    p99: Duration,
    cpu_per_request: Option<Duration>,
}

async fn latency(
    client: &reqwest::Client,
    target: &Target,
    body: &Value,
    n: usize,
) -> Result<Latency> {
    for _ in 0..(n / 10).max(20) {
        target
            .request(client, body, &[])
            .send()
            .await
            .map_err(|e| e.to_string())?
            .bytes()
            .await
            .map_err(|e| e.to_string())?;
    }
    let cpu_before = target.pid.map(cpu_ns);
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let response = target
            .request(client, body, &[])
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("{}: status {}", target.name, response.status()));
        }
        response.bytes().await.map_err(|e| e.to_string())?;
        times.push(start.elapsed());
    }
    let cpu = target
        .pid
        .zip(cpu_before)
        .map(|(pid, before)| Duration::from_nanos((cpu_ns(pid) - before) / n as u64));
    times.sort();
    Ok(Latency {
        p50: percentile(&times, 0.5),
        p99: percentile(&times, 0.99),
        cpu_per_request: cpu,
    })
}

async fn throughput(
    client: &reqwest::Client,
    target: &Target,
    body: &Value,
    concurrency: usize,
    seconds: u64,
) -> Result<(f64, Option<Duration>)> {
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_before = target.pid.map(cpu_ns);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, target, body, count, stop) = (
            client.clone(),
            target.clone(),
            body.clone(),
            count.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(r) = target.request(&client, &body, &[]).send().await
                    && r.bytes().await.is_ok()
                {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let done = count.load(Ordering::Relaxed).max(1);
    let cpu = target
        .pid
        .zip(cpu_before)
        .map(|(pid, before)| Duration::from_nanos((cpu_ns(pid) - before) / done));
    Ok((done as f64 / elapsed, cpu))
}

/// What `n` 200-chunk streams through a target measured.
struct Streams {
    /// From sending to the first event (p50).
    first: Duration,
    /// From sending to the end of the stream (p50).
    whole: Duration,
    /// The gateway's CPU time per stream.
    cpu_per_stream: Option<Duration>,
}

/// Time from sending to the first event of a 200-chunk stream, to its end, and the gateway's
/// CPU per stream (after ten streams of warm-up).
async fn stream_times(
    client: &reqwest::Client,
    target: &Target,
    body: &Value,
    n: usize,
) -> Result<Streams> {
    let extra = [("x-mock-chunks", "200")];
    let mut firsts = Vec::with_capacity(n);
    let mut totals = Vec::with_capacity(n);
    let mut cpu_before = None;
    for i in 0..n + 10 {
        if i == 10 {
            cpu_before = target.pid.map(cpu_ns);
        }
        let start = Instant::now();
        let response = target
            .request(client, body, &extra)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let mut stream = response.bytes_stream();
        let mut first = None;
        let mut events = 0;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            if first.is_none() && chunk.windows(5).any(|w| w == b"data:") {
                first = Some(start.elapsed());
            }
            events += chunk.windows(5).filter(|w| *w == b"data:").count();
        }
        if events < 200 {
            return Err(format!("{}: only {events} events streamed", target.name));
        }
        if i >= 10 {
            firsts.push(first.unwrap_or_default());
            totals.push(start.elapsed());
        }
    }
    let cpu_per_stream = target
        .pid
        .zip(cpu_before)
        .map(|(pid, before)| Duration::from_nanos((cpu_ns(pid) - before) / n as u64));
    firsts.sort();
    totals.sort();
    Ok(Streams {
        first: percentile(&firsts, 0.5),
        whole: percentile(&totals, 0.5),
        cpu_per_stream,
    })
}

/// Peak RSS of the gateway while 256 streams are open through it.
async fn rss_under_streams(
    client: &reqwest::Client,
    target: &Target,
    mock: &MockUpstream,
    body: &Value,
) -> Result<f64> {
    let pid = target.pid.ok_or("no pid")?;
    let mut open = Vec::new();
    for _ in 0..256 {
        let response = target
            .request(client, body, &[("x-mock-scenario", "hold")])
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let mut stream = response.bytes_stream();
        stream.next().await;
        open.push(stream);
    }
    let rss = memory_mib(pid, "VmRSS");
    mock.release();
    for mut s in open {
        while s.next().await.is_some() {}
    }
    Ok(rss)
}

/// `perf record` on the pass-through and on Herma while each serves a phase, when
/// `HERMA_LOAD_PERF` names a directory: it gets the file named for the phase
/// (`perf report -i FILE`, or `scripts/perf-breakdown FILE`). The CPU figures of a profiled
/// run include perf's sampling cost.
struct Profiler(Option<(std::process::Child, std::path::PathBuf)>);

impl Profiler {
    async fn start(target: &Target, file: &str) -> Result<Self> {
        #[allow(clippy::disallowed_methods)] // a developer tool configured by its environment
        let Some(dir) = std::env::var_os("HERMA_LOAD_PERF") else {
            return Ok(Self(None));
        };
        let out = Path::new(&dir).join(file);
        let pid = target.pid.ok_or("no pid to profile")?.to_string();
        let child = std::process::Command::new("perf")
            .args(["record", "-F", "1999", "--call-graph", "dwarf,16384"])
            .args(["-p", &pid, "-o"])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("perf record could not start: {e}"))?;
        // perf needs a moment to attach before the phase starts.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(Self(Some((child, out))))
    }

    fn stop(self) -> Result<()> {
        let Some((mut child, out)) = self.0 else {
            return Ok(());
        };
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "perf record ended before the phase did ({status}); its message is above"
            ));
        }
        // SIGINT makes perf write its file and exit.
        let pid = child.id().to_string();
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .map_err(|e| e.to_string())?;
        child.wait().map_err(|e| e.to_string())?;
        let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        if bytes == 0 {
            return Err(format!("perf record wrote nothing to {}", out.display()));
        }
        eprintln!("profile written: {} ({bytes} bytes)", out.display());
        Ok(())
    }
}

/// A database with one key whose caller has 1,000 tier-1 rules, one shim and one direct rule.
fn prepare_herma(herma: &Path, dir: &Path) -> Result<(String, String)> {
    let database = format!("sqlite://{}", dir.join("herma.db").display());
    let key: Value = serde_json::from_str(&run_cli(
        herma,
        &["keys", "create", "--scope", "route", "--json"],
        &database,
    )?)
    .map_err(|e| e.to_string())?;
    let caller = key["caller_scope"]
        .as_str()
        .ok_or("no caller scope")?
        .to_owned();
    let mut provisions = String::new();
    for i in 0..1000 {
        let mut triggers = json!({"keywords": [format!("topic{i}"), format!("subject {i}")]});
        if i % 20 == 0 {
            triggers["regex"] = json!([format!(r"\bticket-{i}\b")]);
        }
        if i % 50 == 0 {
            triggers["paths"] = json!([format!("**/module{i}/*.rs")]);
        }
        provisions.push_str(&json!({"id": format!("rule-{i:04}"), "action": "shim_context", "triggers": triggers, "context_refs": ["bench.checklist"]}).to_string());
        provisions.push('\n');
    }
    provisions.push_str(&json!({"id": "bench.deploy", "action": "shim_context", "triggers": {"keywords": ["deploy"]}, "context_refs": ["bench.checklist"]}).to_string());
    provisions.push('\n');
    provisions.push_str(&json!({"id": "bench.status", "action": "respond_directly", "priority": 50, "triggers": {"keywords": ["status-check"]}, "response": {"text": "All systems nominal."}}).to_string());
    provisions.push('\n');
    let context = json!({"id": "bench.checklist", "kind": "verb", "title": "Deploy checklist", "schema_or_body": "Run the migrations before the canary; watch the error rate for ten minutes; roll back on any page."}).to_string();
    std::fs::write(dir.join("provisions.jsonl"), provisions).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("context.jsonl"), context + "\n").map_err(|e| e.to_string())?;
    let p = dir.join("provisions.jsonl");
    let c = dir.join("context.jsonl");
    run_cli(
        herma,
        &[
            "context",
            "import",
            c.to_str().unwrap_or_default(),
            "--caller",
            &caller,
        ],
        &database,
    )?;
    run_cli(
        herma,
        &[
            "provisions",
            "import",
            p.to_str().unwrap_or_default(),
            "--caller",
            &caller,
        ],
        &database,
    )?;
    Ok((database, key["key"].as_str().ok_or("no key")?.to_owned()))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let plan = Plan::from_env();
    // Another build of Herma under this same harness (an A/B of two commits), when named.
    #[allow(clippy::disallowed_methods)] // a developer tool configured by its environment
    let herma = match std::env::var_os("HERMA_LOAD_HERMA") {
        Some(path) => std::path::PathBuf::from(path),
        None => sibling("herma")?,
    };
    let passthrough_bin = sibling("herma-passthrough")?;
    let mock = MockUpstream::start_with(false).await;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (database, key) = prepare_herma(&herma, dir.path())?;

    let herma_gateway = spawn_gateway(
        &herma,
        &["serve", "--bind", "127.0.0.1:0"],
        &[
            ("HERMA_DATABASE_URL", database.clone()),
            ("HERMA_LOG", "warn,herma=info".into()),
            ("HERMA_UPSTREAM_BASE_URL", mock.url()),
        ],
    )?;
    // The same Herma without entity memory, to show what memory costs a request.
    let herma_no_memory = spawn_gateway(
        &herma,
        &["serve", "--bind", "127.0.0.1:0"],
        &[
            ("HERMA_DATABASE_URL", database),
            ("HERMA_LOG", "warn,herma=info".into()),
            ("HERMA_UPSTREAM_BASE_URL", mock.url()),
            ("HERMA_MEMORY_ENABLED", "false".into()),
        ],
    )?;
    let herma_idle_rss = memory_mib(herma_gateway.pid(), "VmRSS");
    let passthrough = spawn_gateway(
        &passthrough_bin,
        &["--bind", "127.0.0.1:0", "--upstream", &mock.url()],
        &[],
    )?;

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .build()
        .map_err(|e| e.to_string())?;
    let direct = Target {
        name: "direct to the mock",
        base: mock.url(),
        headers: vec![],
        pid: None,
    };
    let bare = Target {
        name: "bare pass-through",
        base: passthrough.base.clone(),
        headers: vec![],
        pid: Some(passthrough.pid()),
    };
    let via_herma = Target {
        name: "Herma",
        base: herma_gateway.base.clone(),
        headers: vec![("authorization", format!("Bearer {key}"))],
        pid: Some(herma_gateway.pid()),
    };
    let via_herma_no_memory = Target {
        name: "Herma, memory off",
        base: herma_no_memory.base.clone(),
        headers: vec![("authorization", format!("Bearer {key}"))],
        pid: Some(herma_no_memory.pid()),
    };

    let system = "You are a careful coding assistant. ".repeat(40);
    let forward_body = json!({"model": "bench-model", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "please deploy the billing service"}]});
    let direct_body = json!({"model": "bench-model", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "status-check"}]});
    let stream_body = json!({"model": "bench-model", "stream": true, "messages": [{"role": "user", "content": "please deploy, streaming"}]});

    eprintln!(
        "measuring latency at concurrency 1 ({} requests each)…",
        plan.latency_requests
    );
    let l_direct = latency(&client, &direct, &forward_body, plan.latency_requests).await?;
    let profiler = Profiler::start(&bare, "passthrough-c1.data").await?;
    let l_bare = latency(&client, &bare, &forward_body, plan.latency_requests).await?;
    profiler.stop()?;
    let profiler = Profiler::start(&via_herma, "herma-c1.data").await?;
    let l_herma = latency(&client, &via_herma, &forward_body, plan.latency_requests).await?;
    profiler.stop()?;
    let l_answer = latency(&client, &via_herma, &direct_body, plan.latency_requests).await?;
    let l_no_memory = latency(
        &client,
        &via_herma_no_memory,
        &forward_body,
        plan.latency_requests,
    )
    .await?;

    eprintln!(
        "measuring throughput at concurrency 32 ({} s each)…",
        plan.throughput_seconds
    );
    let (t_direct, _) =
        throughput(&client, &direct, &forward_body, 32, plan.throughput_seconds).await?;
    let profiler = Profiler::start(&bare, "passthrough.data").await?;
    let (t_bare, c_bare) =
        throughput(&client, &bare, &forward_body, 32, plan.throughput_seconds).await?;
    profiler.stop()?;
    let profiler = Profiler::start(&via_herma, "herma.data").await?;
    let (t_herma, c_herma) = throughput(
        &client,
        &via_herma,
        &forward_body,
        32,
        plan.throughput_seconds,
    )
    .await?;
    profiler.stop()?;
    let profiler = Profiler::start(&via_herma_no_memory, "herma-memory-off.data").await?;
    let (t_no_memory, c_no_memory) = throughput(
        &client,
        &via_herma_no_memory,
        &forward_body,
        32,
        plan.throughput_seconds,
    )
    .await?;
    profiler.stop()?;
    let profiler = Profiler::start(&via_herma, "herma-direct.data").await?;
    let (t_answer, c_answer) = throughput(
        &client,
        &via_herma,
        &direct_body,
        32,
        plan.throughput_seconds,
    )
    .await?;
    profiler.stop()?;

    eprintln!(
        "measuring 200-chunk streams ({} each)…",
        plan.stream_requests
    );
    let s_direct = stream_times(&client, &direct, &stream_body, plan.stream_requests).await?;
    let profiler = Profiler::start(&bare, "passthrough-streams.data").await?;
    let s_bare = stream_times(&client, &bare, &stream_body, plan.stream_requests).await?;
    profiler.stop()?;
    let profiler = Profiler::start(&via_herma, "herma-streams.data").await?;
    let s_herma = stream_times(&client, &via_herma, &stream_body, plan.stream_requests).await?;
    profiler.stop()?;

    eprintln!("measuring memory under 256 open streams…");
    let herma_streams_rss = rss_under_streams(&client, &via_herma, &mock, &stream_body).await?;
    let herma_peak = memory_mib(via_herma.pid.unwrap_or_default(), "VmHWM");

    let added = |a: Duration, b: Duration| ms(a.saturating_sub(b));
    let cpu = |d: Option<Duration>| {
        d.map(|d| format!("{:.3} ms", ms(d)))
            .unwrap_or_else(|| "–".into())
    };
    println!("### Load harness results\n");
    println!(
        "Pinned: gateways on core 0 {}, load generator and mock on the other.\n",
        if taskset_available() {
            "(taskset)"
        } else {
            "(taskset missing: unpinned)"
        }
    );
    println!(
        "Forwarding: Herma's caller has 1,000 tier-1 rules; the request matches one shim (context added), receipts on. Body ≈ {} bytes.\n",
        forward_body.to_string().len()
    );
    println!("| measure | direct to mock | bare pass-through | Herma |");
    println!("|---|---|---|---|");
    println!(
        "| latency p50, concurrency 1 | {:.3} ms | {:.3} ms (+{:.3}) | {:.3} ms (+{:.3}) |",
        ms(l_direct.p50),
        ms(l_bare.p50),
        added(l_bare.p50, l_direct.p50),
        ms(l_herma.p50),
        added(l_herma.p50, l_direct.p50)
    );
    println!(
        "| latency p99, concurrency 1 | {:.3} ms | {:.3} ms (+{:.3}) | {:.3} ms (+{:.3}) |",
        ms(l_direct.p99),
        ms(l_bare.p99),
        added(l_bare.p99, l_direct.p99),
        ms(l_herma.p99),
        added(l_herma.p99, l_direct.p99)
    );
    println!(
        "| gateway CPU per request, concurrency 1 | – | {} | {} |",
        cpu(l_bare.cpu_per_request),
        cpu(l_herma.cpu_per_request)
    );
    println!(
        "| throughput, concurrency 32 | {t_direct:.0} req/s | {t_bare:.0} req/s | {t_herma:.0} req/s |"
    );
    println!(
        "| gateway CPU per request, concurrency 32 | – | {} | {} |",
        cpu(c_bare),
        cpu(c_herma)
    );
    println!(
        "| first SSE event, 200-chunk stream (p50) | {:.3} ms | {:.3} ms (+{:.3}) | {:.3} ms (+{:.3}) |",
        ms(s_direct.first),
        ms(s_bare.first),
        added(s_bare.first, s_direct.first),
        ms(s_herma.first),
        added(s_herma.first, s_direct.first)
    );
    println!(
        "| whole 200-chunk stream (p50) | {:.3} ms | {:.3} ms | {:.3} ms |",
        ms(s_direct.whole),
        ms(s_bare.whole),
        ms(s_herma.whole)
    );
    println!(
        "| gateway CPU per 200-chunk stream | – | {} | {} |",
        cpu(s_bare.cpu_per_stream),
        cpu(s_herma.cpu_per_stream)
    );
    println!();
    println!(
        "Direct answer (Herma answers, no upstream): p50 {:.3} ms, p99 {:.3} ms, CPU {} per request.\n",
        ms(l_answer.p50),
        ms(l_answer.p99),
        cpu(l_answer.cpu_per_request)
    );
    println!(
        "Direct answers at concurrency 32: {t_answer:.0} req/s, CPU {} per request.\n",
        cpu(c_answer)
    );
    println!(
        "Entity memory on (as above) and off, same run and database: latency p50 {:.3} / {:.3} ms, p99 {:.3} / {:.3} ms, CPU per request at c=1 {} / {}; at c=32 {t_herma:.0} / {t_no_memory:.0} req/s, CPU {} / {} per request.\n",
        ms(l_herma.p50),
        ms(l_no_memory.p50),
        ms(l_herma.p99),
        ms(l_no_memory.p99),
        cpu(l_herma.cpu_per_request),
        cpu(l_no_memory.cpu_per_request),
        cpu(c_herma),
        cpu(c_no_memory)
    );
    println!(
        "Herma RSS: {herma_idle_rss:.1} MiB idle after start; {herma_streams_rss:.1} MiB with 256 streams open; peak {herma_peak:.1} MiB.\n"
    );
    let ratio = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) if !b.is_zero() => format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64()),
        _ => "–".into(),
    };
    let beyond = |a: Duration, b: Duration| format!("{:+.3} ms", ms(a) - ms(b));
    println!("Herma against the pass-through, same run (issue 18's targets):\n");
    println!("| measure | Herma ÷ or − pass-through | target |");
    println!("|---|---|---|");
    println!(
        "| CPU per forwarded request, concurrency 32 | {} | ≤ 1.3× |",
        ratio(c_herma, c_bare)
    );
    println!(
        "| added latency p50, concurrency 1 | {} | ≤ +0.010 ms |",
        beyond(l_herma.p50, l_bare.p50)
    );
    println!(
        "| CPU per 200-chunk stream | {} | ≤ 1.2× |",
        ratio(s_herma.cpu_per_stream, s_bare.cpu_per_stream)
    );
    println!(
        "| first SSE event (p50) | {} | ≤ +0.050 ms |",
        beyond(s_herma.first, s_bare.first)
    );
    println!(
        "| CPU per direct answer vs per forwarded request, concurrency 32 | {} | ≤ 1× |",
        ratio(c_answer, c_bare)
    );
    Ok(())
}
