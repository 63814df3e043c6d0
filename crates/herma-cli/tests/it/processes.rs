//! Many processes, one database: two real `herma serve` processes on one PostgreSQL schema,
//! driven concurrently, keep one ledger and one provider health (issue 14, item 8).

use std::path::Path;

use herma_test_support::mock_providers::{Answer, KEY, Kind, MockProvider};
use serde_json::{Value, json};

use crate::{Server, run, stdout};

/// A fresh schema of the test database, migrated, as a URL the binary takes.
async fn fresh_database() -> String {
    let schema = herma_test_support::fresh_schema_name();
    let base = herma_test_support::test_database_url();
    herma_test_support::postgres_schema(&base, &schema)
        .await
        .expect("create the test schema");
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
}

/// Migrates the database `env` names and issues `count` route keys, each holding the work
/// contract `work.review`; returns the keys.
pub(crate) fn keys(dir: &Path, env: &[(&str, &str)], count: usize) -> Vec<String> {
    assert!(run(dir, &["migrate"], env).status.success());
    let contract = json!({"id": "work.review", "kind": "verb", "title": "Schedule a review", "schema_or_body": {"work_contract": {
        "operation_id": "schedule_review", "category_id": "review", "description": "Schedule a review of one document.",
        "input_schema": {"type": "object", "properties": {"document": {"type": "string", "maxLength": 80}},
            "required": ["document"], "additionalProperties": false}}}});
    let file = dir.join("contract.jsonl");
    std::fs::write(&file, format!("{contract}\n")).unwrap();
    (0..count)
        .map(|_| {
            let out = run(dir, &["keys", "create", "--scope", "route", "--json"], env);
            assert!(out.status.success());
            let key: Value = serde_json::from_str(&stdout(&out)).unwrap();
            let caller = key["caller_scope"].as_str().unwrap();
            let imported = run(
                dir,
                &[
                    "context",
                    "import",
                    file.to_str().unwrap(),
                    "--caller",
                    caller,
                ],
                env,
            );
            assert!(imported.status.success());
            key["key"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn settings(
    url: &str,
    mock: &MockProvider,
    keys: &[String],
    budget: &str,
) -> Vec<(String, String)> {
    let grants: Vec<Value> = keys
        .iter()
        .map(|k| json!({"caller_scope": format!("key:{}", &k[4..20]), "providers": [{"provider": "meta", "model": "muse-spark-1.3"}]}))
        .collect();
    [
        ("HERMA_DATABASE_URL", url.to_owned()),
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

fn serve(dir: &Path, settings: &[(String, String)]) -> Server {
    let env: Vec<(&str, &str)> = settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    Server::start(dir, &env)
}

async fn turn(client: &reqwest::Client, base: &str, key: &str, conversation: &str) -> (u16, Value) {
    let response = client
        .post(format!("{base}/v1/conversations/turn"))
        .bearer_auth(key)
        .json(&json!({"conversation_id": conversation, "request_id": "r1", "expected_version": 0,
            "message": "Which reviews can I schedule today?", "context_refs": ["work.review"], "provider": "meta"}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// `1.2345` dollars as microdollars, digit by digit.
fn micros(usd: &str) -> u64 {
    let (whole, fraction) = usd.split_once('.').unwrap_or((usd, ""));
    whole.parse::<u64>().unwrap() * 1_000_000 + format!("{fraction:0<6}").parse::<u64>().unwrap()
}

fn reserved_micros(dir: &Path, url: &str, settings: &[(String, String)]) -> u64 {
    let env: Vec<(&str, &str)> = settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain([("HERMA_DATABASE_URL", url)])
        .collect();
    let out = run(dir, &["conversations", "budget", "--json"], &env);
    assert!(out.status.success());
    let summary: Value = serde_json::from_str(&stdout(&out)).unwrap();
    micros(summary["providers"][0]["reserved_usd"].as_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_on_one_postgres_keep_one_ceiling_and_one_provider_health() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockProvider::start(Kind::Meta).await;
    let client = reqwest::Client::new();

    // One turn's reservation, measured on a database of its own.
    let probe_url = fresh_database().await;
    let probe_keys = keys(dir.path(), &[("HERMA_DATABASE_URL", &probe_url)], 2);
    let probe_settings = settings(&probe_url, &mock, &probe_keys, "1000");
    let probe = serve(dir.path(), &probe_settings);
    let (status, answer) = turn(&client, &probe.base, &probe_keys[0], "probe").await;
    assert_eq!(status, 200, "{answer}");
    let per_turn = micros(
        answer["attempts"][0]["reservation_ceiling_usd"]
            .as_str()
            .unwrap(),
    );

    // A ceiling of exactly ten turns; 32 turns from 16 keys race through two processes.
    const ADMITTED: u64 = 10;
    let url = fresh_database().await;
    let race_keys = keys(dir.path(), &[("HERMA_DATABASE_URL", &url)], 16);
    let ceiling = per_turn * ADMITTED;
    let budget = format!("{}.{:06}", ceiling / 1_000_000, ceiling % 1_000_000);
    let race_settings = settings(&url, &mock, &race_keys, &budget);
    let (first, second) = (
        serve(dir.path(), &race_settings),
        serve(dir.path(), &race_settings),
    );
    let mut tasks = Vec::new();
    for i in 0..32 {
        let client = client.clone();
        let base = if i % 2 == 0 {
            first.base.clone()
        } else {
            second.base.clone()
        };
        let key = race_keys[i % 16].clone();
        tasks.push(tokio::spawn(async move {
            turn(&client, &base, &key, &format!("race-{i}")).await
        }));
    }
    let (mut answered, mut denied) = (0, 0);
    for task in tasks {
        let (status, body) = task.await.unwrap();
        match status {
            200 => answered += 1,
            429 => {
                assert_eq!(body["reason"], "provider_budget_denied", "{body}");
                denied += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!((answered, denied), (ADMITTED, 32 - ADMITTED));
    assert_eq!(reserved_micros(dir.path(), &url, &race_settings), ceiling);
    drop((first, second));

    // A limit one process meets holds for the other.
    let other = serve(dir.path(), &probe_settings);
    mock.answer([Answer::RateLimited { retry_after: 60 }]);
    let calls = mock.calls();
    let (_, limited) = turn(&client, &probe.base, &probe_keys[0], "limited").await;
    assert_eq!(limited["reason"], "provider_rate_limited", "{limited}");
    let (_, skipped) = turn(&client, &other.base, &probe_keys[1], "skipped").await;
    assert_eq!(skipped["attempts"][0]["skip"], "cooldown", "{skipped}");
    assert_eq!(mock.calls(), calls + 1, "the second process sent nothing");
}

/// Every `herma` command in docs/operations.md's shell blocks is one the binary accepts as
/// written (its flags exist).
#[test]
fn the_commands_of_docs_operations_exist_as_written() {
    let doc = include_str!("../../../../docs/operations.md");
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut in_block = false;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_block = line == "```sh";
            continue;
        }
        let Some(command) = line.strip_prefix("herma ").filter(|_| in_block) else {
            continue;
        };
        let mut args: Vec<&str> = command.trim_end_matches('&').split_whitespace().collect();
        args.push("--help");
        let out = run(dir.path(), &args, &[]);
        assert!(
            out.status.success(),
            "herma {command}: {}",
            crate::stderr(&out)
        );
        checked += 1;
    }
    assert!(checked >= 3, "{checked} commands found");
}
