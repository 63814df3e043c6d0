//! The conversation-turn harness: Herma's own cost of one typed-conversation turn, the provider
//! excluded (a local Meta stand-in in this process answers instantly), on SQLite and on
//! PostgreSQL; turn admissions per second at concurrency 8; and the microdollars reserved past
//! a budget when 64 turns race for it (must be 0); and on PostgreSQL, 1,000 concurrent turns
//! from 50 callers through two `herma serve` processes on one database against a ceiling that
//! admits exactly 400 (admitted must be 400, microdollars over 0).
//!
//! ```sh
//! cargo build --release -p herma-cli -p herma-bench
//! taskset -c 1 target/release/herma-turns     # Herma runs under `taskset -c 0`
//! ```
//!
//! PostgreSQL is measured when `HERMA_BENCH_DATABASE_URL` (or the local server at
//! `postgres://postgres@127.0.0.1:5432/test`) answers `psql`; a scratch database is created and
//! dropped. `HERMA_LOAD_SCALE` scales the turn counts.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use herma_bench::{Gateway, Result, cpu_ns, run_cli, sibling, spawn_gateway};

use herma_mocks::mock_providers::{KEY, Kind, MockProvider};
use serde_json::{Value, json};

/// Each key may start 60 turns an hour: the turns are spread over this many keys.
const KEYS: usize = 40;

fn serve(herma: &Path, env: &[(String, String)]) -> Result<Gateway> {
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    spawn_gateway(herma, &["serve", "--bind", "127.0.0.1:0"], &env)
}

/// Keys with the contract, on `database`; returns the keys.
fn prepare(herma: &Path, dir: &Path, database: &str) -> Result<Vec<String>> {
    prepare_keys(herma, dir, database, KEYS)
}

fn prepare_keys(herma: &Path, dir: &Path, database: &str, count: usize) -> Result<Vec<String>> {
    run_cli(herma, &["migrate"], database)?;
    let contract = json!({"id": "work.review", "kind": "verb", "title": "Schedule a review", "schema_or_body": {"work_contract": {
        "operation_id": "schedule_review", "category_id": "review", "description": "Schedule a review of one document.",
        "input_schema": {"type": "object", "properties": {"document": {"type": "string", "maxLength": 80}, "days": {"type": "integer", "minimum": 1}},
            "required": ["document", "days"], "additionalProperties": false}}}});
    let file = dir.join("contract.jsonl");
    std::fs::write(&file, format!("{contract}\n")).map_err(|e| e.to_string())?;
    let mut keys = Vec::new();
    for _ in 0..count {
        let key: Value = serde_json::from_str(&run_cli(
            herma,
            &["keys", "create", "--scope", "route", "--json"],
            database,
        )?)
        .map_err(|e| e.to_string())?;
        let caller = key["caller_scope"].as_str().ok_or("no scope")?.to_owned();
        run_cli(
            herma,
            &[
                "context",
                "import",
                file.to_str().unwrap_or_default(),
                "--caller",
                &caller,
            ],
            database,
        )?;
        keys.push(key["key"].as_str().ok_or("no key")?.to_owned());
    }
    Ok(keys)
}

fn settings(
    database: &str,
    mock: &MockProvider,
    keys: &[String],
    budget: &str,
) -> Vec<(String, String)> {
    let grants: Vec<Value> = keys
        .iter()
        .map(|k| json!({"caller_scope": format!("key:{}", &k[4..20]), "providers": [{"provider": "meta", "model": "muse-spark-1.3"}]}))
        .collect();
    [
        ("HERMA_DATABASE_URL", database.to_owned()),
        ("HERMA_LOG", "warn,herma=info".to_owned()),
        ("HERMA_CONVERSATION_ENABLED", "true".to_owned()),
        ("HERMA_CONVERSATION_META_MAX_OUTPUT", "256".to_owned()),
        ("HERMA_META_BUDGET_USD", budget.to_owned()),
        ("META_API_KEY", KEY.to_owned()),
        ("HERMA_CONVERSATION_META_BASE_URL", mock.origin()),
        (
            "HERMA_CONVERSATION_PROVIDER_GRANTS",
            Value::Array(grants).to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn body(conversation: &str) -> Value {
    json!({"conversation_id": conversation, "request_id": "r1", "expected_version": 0,
        "message": "Which reviews can I schedule today?", "context_refs": ["work.review"], "provider": "meta"})
}

async fn post(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    body: &Value,
) -> Result<(u16, Value)> {
    let response = client
        .post(format!("{base}/v1/conversations/turn"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    Ok((status, response.json().await.map_err(|e| e.to_string())?))
}

struct Figures {
    p50: Duration,
    cpu_per_turn: Duration,
    admissions_per_second: f64,
    provider_p50: Duration,
}

async fn measure(herma: &Path, database: &str, dir: &Path, turns: usize) -> Result<Figures> {
    let mock = MockProvider::start(Kind::Meta).await;
    let keys = prepare(herma, dir, database)?;
    let gateway = serve(herma, &settings(database, &mock, &keys, "1000000"))?;
    let pid = gateway.pid();
    let client = reqwest::Client::new();
    let mut next = 0usize;
    let mut conversation = || {
        next += 1;
        (keys[next % KEYS].clone(), format!("bench-{next}"))
    };
    for _ in 0..20 {
        let (key, id) = conversation();
        post(&client, &gateway.base, &key, &body(&id)).await?;
    }
    // Sequential turns: latency and Herma's CPU per turn.
    let cpu_before = cpu_ns(pid);
    let mut times = Vec::with_capacity(turns);
    for _ in 0..turns {
        let (key, id) = conversation();
        let start = Instant::now();
        let (status, answer) = post(&client, &gateway.base, &key, &body(&id)).await?;
        if status != 200 {
            return Err(format!("turn answered {status}: {answer}"));
        }
        times.push(start.elapsed());
    }
    let cpu_per_turn = Duration::from_nanos((cpu_ns(pid) - cpu_before) / turns as u64);
    times.sort();
    let p50 = times[times.len() / 2];
    // Admissions per second at concurrency 8 (each key has at most two active turns).
    let concurrent = turns.min(KEYS * 50);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let client = client.clone();
        let base = gateway.base.clone();
        let jobs: Vec<(String, String)> = (0..concurrent / 8)
            .map(|i| {
                let n = 100_000 + worker * 10_000 + i;
                (keys[(worker + i * 8) % KEYS].clone(), format!("c-{n}"))
            })
            .collect();
        tasks.push(tokio::spawn(async move {
            let mut answered = 0usize;
            for (key, id) in jobs {
                if post(&client, &base, &key, &body(&id)).await?.0 == 200 {
                    answered += 1;
                }
            }
            Ok::<usize, String>(answered)
        }));
    }
    let mut answered = 0;
    for task in tasks {
        answered += task.await.map_err(|e| e.to_string())??;
    }
    let admissions_per_second = answered as f64 / start.elapsed().as_secs_f64();
    // The provider's own round trip, for comparison.
    let mut provider = Vec::new();
    let direct = json!({"model": "muse-spark-1.3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 256});
    for _ in 0..200 {
        let start = Instant::now();
        client
            .post(format!("{}/v1/chat/completions", mock.origin()))
            .bearer_auth(KEY)
            .json(&direct)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .bytes()
            .await
            .map_err(|e| e.to_string())?;
        provider.push(start.elapsed());
    }
    provider.sort();
    Ok(Figures {
        p50,
        cpu_per_turn,
        admissions_per_second,
        provider_p50: provider[provider.len() / 2],
    })
}

/// 64 turns race for a budget that covers exactly 20: how much is reserved past it.
async fn over_the_ceiling(herma: &Path, database: &str, dir: &Path) -> Result<(usize, i128)> {
    let mock = MockProvider::start(Kind::Meta).await;
    let keys = prepare(herma, dir, database)?;
    // One turn's reservation, from a probe server with a large budget.
    let probe = serve(herma, &settings(database, &mock, &keys, "1000000"))?;
    let client = reqwest::Client::new();
    let (_, answer) = post(&client, &probe.base, &keys[0], &body("probe")).await?;
    drop(probe);
    let per_turn = answer["attempts"][0]["reservation_ceiling_usd"]
        .as_str()
        .ok_or("no reservation")?;
    let micros = micros_of(per_turn).ok_or("unreadable reservation")?;
    let ceiling = micros * 20;
    let budget = format!("{}.{:06}", ceiling / 1_000_000, ceiling % 1_000_000);
    // A fresh ledger: another database file.
    let fresh = format!("{database}-race");
    let keys = prepare(herma, dir, &fresh)?;
    let gateway = serve(herma, &settings(&fresh, &mock, &keys, &budget))?;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let client = client.clone();
        let base = gateway.base.clone();
        let key = keys[i % KEYS].clone();
        tasks.push(tokio::spawn(async move {
            post(&client, &base, &key, &body(&format!("race-{i}"))).await
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        let (status, _) = task.await.map_err(|e| e.to_string())??;
        if status == 200 {
            admitted += 1;
        }
    }
    let reserved = micros * admitted as i128;
    Ok((admitted, reserved - ceiling))
}

/// 1,000 concurrent turns from 50 callers through two processes on one database (`database`
/// fresh), against a ceiling of exactly `admit` reservations: (admitted, budget-denied, µ$
/// reserved past the ceiling). A turn refused because its caller already has two active turns
/// is sent again (that limit is the caller's, not the ceiling's).
async fn two_processes(
    herma: &Path,
    probe_database: &str,
    database: &str,
    dir: &Path,
    admit: i128,
) -> Result<(usize, usize, i128)> {
    const CALLERS: usize = 50;
    const TURNS: usize = 1000;
    let mock = MockProvider::start(Kind::Meta).await;
    let client = reqwest::Client::new();
    let probe_keys = prepare_keys(herma, dir, probe_database, 1)?;
    let probe = serve(
        herma,
        &settings(probe_database, &mock, &probe_keys, "1000000"),
    )?;
    let (_, answer) = post(&client, &probe.base, &probe_keys[0], &body("probe")).await?;
    drop(probe);
    let per_turn = answer["attempts"][0]["reservation_ceiling_usd"]
        .as_str()
        .and_then(micros_of)
        .ok_or("no reservation")?;
    let ceiling = per_turn * admit;
    let budget = format!("{}.{:06}", ceiling / 1_000_000, ceiling % 1_000_000);
    let keys = prepare_keys(herma, dir, database, CALLERS)?;
    let env = settings(database, &mock, &keys, &budget);
    let gateways = [serve(herma, &env)?, serve(herma, &env)?];
    let mut tasks = Vec::new();
    for i in 0..TURNS {
        let client = client.clone();
        let base = gateways[i % 2].base.clone();
        let key = keys[i % CALLERS].clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let (status, answer) =
                    post(&client, &base, &key, &body(&format!("two-{i}"))).await?;
                if status == 429 && answer["reason"] == "active_turns" {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                return Ok::<(u16, Value), String>((status, answer));
            }
        }));
    }
    let (mut admitted, mut denied) = (0, 0);
    for task in tasks {
        let (status, answer) = task.await.map_err(|e| e.to_string())??;
        match (status, answer["reason"].as_str()) {
            (200, _) => admitted += 1,
            (429, Some("provider_budget_denied")) => denied += 1,
            _ => return Err(format!("a turn answered {status}: {answer}")),
        }
    }
    drop(gateways);
    let summary: Value = serde_json::from_str(&run_cli(
        herma,
        &["conversations", "budget", "--json"],
        database,
    )?)
    .map_err(|e| e.to_string())?;
    let reserved = summary["providers"][0]["reserved_usd"]
        .as_str()
        .and_then(micros_of)
        .ok_or("no reserved dollars")?;
    Ok((admitted, denied, reserved - ceiling))
}

/// `1.2345` dollars as microdollars, digit by digit (no float near money).
fn micros_of(usd: &str) -> Option<i128> {
    let (whole, fraction) = usd.split_once('.').unwrap_or((usd, ""));
    if fraction.len() > 6 {
        return None;
    }
    let whole: i128 = whole.parse().ok()?;
    let fraction: i128 = format!("{fraction:0<6}").parse().ok()?;
    Some(whole * 1_000_000 + fraction)
}

fn postgres_url() -> Option<String> {
    #[allow(clippy::disallowed_methods)] // a developer tool configured by its environment
    let url = std::env::var("HERMA_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let ok = Command::new("psql")
        .args([url.as_str(), "-Atqc", "select 1"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(url)
}

fn psql(url: &str, sql: &str) -> Result<()> {
    let out = Command::new("psql")
        .args([url, "-Atqc", sql])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    #[allow(clippy::disallowed_methods)] // a developer tool configured by its environment
    let scale: f64 = std::env::var("HERMA_LOAD_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let turns = ((1000.0 * scale) as usize).clamp(40, KEYS * 40);
    let herma = sibling("herma")?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    println!("### Conversation turns ({turns} sequential turns, provider answering in-process)\n");
    println!(
        "| store | turn p50 | provider p50 | Herma CPU per turn | admissions/s at c=8 | µ$ over a 20-turn budget, 64 racing |"
    );
    println!("|---|---|---|---|---|---|");
    let sqlite = format!("sqlite://{}", dir.path().join("turns.db").display());
    eprintln!("measuring on SQLite…");
    let f = measure(&herma, &sqlite, dir.path(), turns).await?;
    let (admitted, over) = over_the_ceiling(
        &herma,
        &format!("sqlite://{}", dir.path().join("race.db").display()),
        dir.path(),
    )
    .await?;
    row("SQLite", &f, admitted, over);
    if let Some(url) = postgres_url() {
        eprintln!("measuring on PostgreSQL…");
        let base = url
            .rsplit_once('/')
            .map(|(b, _)| b.to_owned())
            .ok_or("bad url")?;
        for name in [
            "herma_turns_bench",
            "herma_turns_race",
            "herma_turns_race-race",
        ] {
            psql(&url, &format!("drop database if exists \"{name}\""))?;
            psql(&url, &format!("create database \"{name}\""))?;
        }
        let f = measure(
            &herma,
            &format!("{base}/herma_turns_bench"),
            dir.path(),
            turns,
        )
        .await?;
        let (admitted, over) =
            over_the_ceiling(&herma, &format!("{base}/herma_turns_race"), dir.path()).await?;
        row("PostgreSQL", &f, admitted, over);
        eprintln!("1,000 turns from 50 callers through two processes…");
        for name in ["herma_turns_two_probe", "herma_turns_two"] {
            psql(&url, &format!("drop database if exists \"{name}\""))?;
            psql(&url, &format!("create database \"{name}\""))?;
        }
        let (admitted, denied, over) = two_processes(
            &herma,
            &format!("{base}/herma_turns_two_probe"),
            &format!("{base}/herma_turns_two"),
            dir.path(),
            400,
        )
        .await?;
        println!(
            "\n1,000 concurrent turns from 50 callers through two processes on one PostgreSQL, a ceiling of exactly 400 reservations: {admitted} admitted, {denied} denied by the budget, {over} µ$ reserved past the ceiling\n"
        );
        for name in [
            "herma_turns_bench",
            "herma_turns_race",
            "herma_turns_race-race",
            "herma_turns_two_probe",
            "herma_turns_two",
        ] {
            let _ = psql(&url, &format!("drop database if exists \"{name}\""));
        }
    }
    Ok(())
}

fn row(store: &str, f: &Figures, admitted: usize, over: i128) {
    println!(
        "| {store} | {:.2} ms | {:.3} ms | {:.2} ms | {:.0} | {over} ({admitted} of 64 admitted) |",
        f.p50.as_secs_f64() * 1000.0,
        f.provider_p50.as_secs_f64() * 1000.0,
        f.cpu_per_turn.as_secs_f64() * 1000.0,
        f.admissions_per_second
    );
}
