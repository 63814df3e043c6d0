//! `kill -9` of `herma serve` in the middle of work (issue 17): 100 proxied streams and 20
//! operator-funded conversation turns in flight, the process killed the moment a response
//! completes, then restarted on the same SQLite database. No receipt of a response the
//! client received whole is lost (the receipt journal), nothing is dispatched twice, and every
//! turn ends sealed `provider_outcome_uncertain` by the same sweeper `herma serve` runs.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use herma_core::time::Clock;
use herma_test_support::mock_providers::{Answer, KEY, Kind, MockProvider};
use herma_test_support::mock_upstream::MockUpstream;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::Server;

const STREAMS: usize = 100;
/// The process is killed as soon as this many streams have completed.
const KILL_AFTER: usize = 40;
const KEYS: usize = 10;
const TURNS_PER_KEY: usize = 2;

fn turn_body(conversation: &str) -> Value {
    json!({"conversation_id": conversation, "request_id": "r1", "expected_version": 0,
        "message": "Which reviews can I schedule today?", "context_refs": ["work.review"], "provider": "meta"})
}

/// How one proxied stream ended, as its client saw it.
struct Seen {
    receipt: Option<String>,
    whole: bool,
}

async fn stream(
    client: reqwest::Client,
    base: String,
    upstream: String,
    key: String,
    n: usize,
) -> Seen {
    let body = json!({"model": "claude-test", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": format!("crash-request-{n}")}]});
    let mut request = client
        .post(format!("{base}/v1/messages"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .header("X-Upstream-Base-Url", upstream)
        .json(&body);
    if n % 2 == 1 {
        // Half the streams stop after their first event: still in flight when the kill comes.
        request = request.header("x-mock-scenario", "hold");
    }
    let Ok(response) = request.send().await else {
        return Seen {
            receipt: None,
            whole: false,
        };
    };
    let receipt = response
        .headers()
        .get("x-herma-receipt")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut text = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        text.extend_from_slice(&chunk);
        // The client knows the answer is whole at Messages' last event, as SDKs do.
        if String::from_utf8_lossy(&text).contains("event: message_stop") {
            return Seen {
                receipt,
                whole: true,
            };
        }
    }
    Seen {
        receipt,
        whole: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_mid_flight_loses_no_receipt_of_a_whole_response_and_dispatches_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = MockUpstream::start().await;
    let provider = MockProvider::start(Kind::Meta).await;
    let client = reqwest::Client::new();

    let keys = crate::processes::keys(dir.path(), &[], KEYS);
    let grants: Vec<Value> = keys
        .iter()
        .map(|k| json!({"caller_scope": format!("key:{}", &k[4..20]), "providers": [{"provider": "meta", "model": "muse-spark-1.3"}]}))
        .collect();
    let grants = Value::Array(grants).to_string();
    let origin = provider.origin();
    let settings = [
        ("HERMA_CONVERSATION_ENABLED", "true"),
        ("HERMA_CONVERSATION_META_MAX_OUTPUT", "256"),
        ("HERMA_META_BUDGET_USD", "1000"),
        ("META_API_KEY", KEY),
        ("HERMA_CONVERSATION_META_BASE_URL", origin.as_str()),
        ("HERMA_CONVERSATION_PROVIDER_GRANTS", grants.as_str()),
    ];
    let server = Server::start(dir.path(), &settings);

    // Every turn's one call hangs at the provider: the turns are in flight at the kill.
    provider.answer((0..KEYS * TURNS_PER_KEY).map(|_| Answer::Stall(Duration::from_secs(60))));
    let mut turns = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        for t in 0..TURNS_PER_KEY {
            let (client, base, key) = (client.clone(), server.base.clone(), key.clone());
            let conversation = format!("crash-{k}-{t}");
            turns.push(tokio::spawn(async move {
                let _ = client
                    .post(format!("{base}/v1/conversations/turn"))
                    .bearer_auth(&key)
                    .json(&turn_body(&conversation))
                    .send()
                    .await;
            }));
        }
    }
    while provider.calls() < KEYS * TURNS_PER_KEY {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // 100 streams; the kill comes the moment the 40th completes at its client.
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let mut streams = Vec::new();
    for n in 0..STREAMS {
        let (client, base, url, key) = (
            client.clone(),
            server.base.clone(),
            upstream.url(),
            keys[n % KEYS].clone(),
        );
        let done = done_tx.clone();
        streams.push(tokio::spawn(async move {
            let seen = stream(client, base, url, key, n).await;
            if seen.whole {
                let _ = done.send(());
            }
            seen
        }));
    }
    for _ in 0..KILL_AFTER {
        done_rx.recv().await.unwrap();
    }
    let pid = server.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    drop(server);
    let mut whole: BTreeMap<String, String> = BTreeMap::new();
    for (n, task) in streams.into_iter().enumerate() {
        let seen = task.await.unwrap();
        if seen.whole {
            whole.insert(
                seen.receipt.expect("a whole response names its receipt"),
                keys[n % KEYS].clone(),
            );
        }
    }
    for task in turns {
        task.await.unwrap();
    }
    assert!(whole.len() >= KILL_AFTER, "{} whole", whole.len());

    // Restarted on the same database: every whole response's receipt is there.
    let restarted = Server::start(dir.path(), &settings);
    for (receipt, key) in &whole {
        let response = client
            .get(format!("{}/v1/receipts/{receipt}", restarted.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            200,
            "the receipt {receipt} of a response its client received whole was lost"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["stream_end"], "completed", "{body}");
    }

    // Nothing was sent upstream twice, and replaying a turn sends nothing.
    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    for request in upstream.requests() {
        let text = request.json()["messages"][0]["content"].to_string();
        *sent.entry(text).or_default() += 1;
    }
    assert!(sent.values().all(|&n| n == 1), "{sent:?}");
    for (k, key) in keys.iter().enumerate() {
        for t in 0..TURNS_PER_KEY {
            let replay = client
                .post(format!("{}/v1/conversations/turn", restarted.base))
                .bearer_auth(key)
                .json(&turn_body(&format!("crash-{k}-{t}")))
                .send()
                .await
                .unwrap();
            assert_ne!(
                replay.status(),
                200,
                "an unfinished turn is not answered again"
            );
        }
    }
    assert_eq!(
        provider.calls(),
        KEYS * TURNS_PER_KEY,
        "no turn was dispatched twice"
    );
    let (status, _) = restarted.terminate();
    assert!(status.success());

    // Two minutes on, the sweeper `herma serve` runs every 30 s seals every unfinished turn.
    let db = dir.path().join("herma.db");
    let stores = herma_test_support::sqlite_stores_at(db.to_str().unwrap()).await;
    let app = herma_test_support::spawn_app_with(stores, &[]).await;
    let wall = herma_store::SystemClock.now().as_millis();
    app.clock
        .advance_millis(wall + 180_000 - app.clock.now().as_millis());
    let sealed = app.app.sweep_conversations().await.unwrap();
    assert_eq!(sealed as usize, KEYS * TURNS_PER_KEY);
    for (k, key) in keys.iter().enumerate() {
        let scope = herma_core::CallerScope::parse(&format!("key:{}", &key[4..20])).unwrap();
        for t in 0..TURNS_PER_KEY {
            let shown = app
                .app
                .conversation_record(&scope, &format!("crash-{k}-{t}"))
                .await
                .unwrap();
            let turn = &shown["recent_turns"][0];
            assert_eq!(turn["status"], "sealed", "{shown}");
            let attempts = turn["attempts"].as_array().unwrap();
            assert_eq!(attempts.len(), 1, "{shown}");
            assert_eq!(
                attempts[0]["outcome"], "provider_outcome_uncertain",
                "{shown}"
            );
        }
    }
}
