//! `GET /metrics`: requests by route template, method, action and status; latency and Herma's
//! added latency; queue depths; rule-index rebuilds; in valid Prometheus text format.

use std::collections::BTreeMap;

use herma_test_support::mock_upstream::MockUpstream;
use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::{assert_problem, req};

/// The samples of a metrics page by `name{labels}`, checking every line's syntax on the way.
fn samples(page: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let mut typed = std::collections::HashSet::new();
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(typed.insert(name.to_owned()), "one TYPE per family: {line}");
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "metric name {name}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        assert!(typed.contains(family), "{name} has a TYPE line before it");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
        assert!(
            out.insert(series.to_owned(), value).is_none(),
            "duplicate {series}"
        );
    }
    out
}

async fn metrics(app: &TestApp) -> BTreeMap<String, f64> {
    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    samples(&response.text().await.unwrap())
}

fn get(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no {series} in {:#?}", samples.keys().collect::<Vec<_>>()))
}

fn messages(text: &str) -> serde_json::Value {
    json!({"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn metrics_count_requests_by_route_action_and_status() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let mock = MockUpstream::start().await;
    let key = app.key("route,configure", Some("claude-code")).await;
    for (path, body) in [
        (
            "/v1/context",
            json!({"id": "deploy.checklist", "kind": "verb", "schema_or_body": "Run the migrations first."}),
        ),
        (
            "/v1/provisions",
            json!({"id": "deploy", "action": "shim_context", "triggers": {"keywords": ["deploy"]}, "context_refs": ["deploy.checklist"]}),
        ),
        (
            "/v1/provisions",
            json!({"id": "freeze", "action": "respond_directly", "triggers": {"keywords": ["freeze"]}, "response": {"text": "Frozen."}}),
        ),
    ] {
        let created = req(Method::POST, path)
            .key(&key)
            .harness("claude-code")
            .json(body)
            .send(&app)
            .await;
        assert_eq!(created.0, StatusCode::CREATED);
    }
    let before = metrics(&app).await;
    let rebuilds = get(&before, "herma_rule_index_rebuilds_total");

    let proxied = |text: &'static str| {
        req(Method::POST, "/v1/messages")
            .key(&key)
            .header("x-upstream-base-url", mock.url())
            .json(messages(text))
    };
    let mut receipt = String::new();
    for text in ["please deploy", "hello", "freeze?", "deploy again"] {
        let (status, headers, _) = proxied(text).send(&app).await;
        assert_eq!(status, StatusCode::OK);
        receipt = headers["x-herma-receipt"].to_str().unwrap().to_owned();
    }
    let refused = req(Method::POST, "/v1/messages")
        .key("hmk_0000000000000000_00")
        .json(messages("hi"))
        .send(&app)
        .await;
    assert_eq!(refused.0, StatusCode::UNAUTHORIZED);
    app.app.receipts.flush().await;

    assert_eq!(
        req(Method::GET, format!("/v1/receipts/{receipt}"))
            .key(&key)
            .send(&app)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        req(Method::GET, "/no/such/page").send(&app).await.0,
        StatusCode::NOT_FOUND
    );

    let after = metrics(&app).await;
    let count = |route: &str, method: &str, action: &str, status: u16| {
        after
            .get(&format!("herma_http_requests_total{{route=\"{route}\",method=\"{method}\",action=\"{action}\",status=\"{status}\"}}"))
            .copied()
            .unwrap_or(0.0)
    };
    assert_eq!(count("/v1/messages", "POST", "shimmed", 200), 2.0);
    assert_eq!(count("/v1/messages", "POST", "forwarded", 200), 1.0);
    assert_eq!(
        count("/v1/messages", "POST", "responded_directly", 200),
        1.0
    );
    assert_eq!(count("/v1/messages", "POST", "failed", 401), 1.0);
    assert_eq!(count("/v1/provisions", "POST", "none", 201), 2.0);
    // Route templates, never raw paths: ids do not multiply series.
    assert_eq!(count("/v1/receipts/{id}", "GET", "none", 200), 1.0);
    assert_eq!(count("unmatched", "GET", "none", 404), 1.0);
    assert!(
        after
            .keys()
            .all(|k| !k.contains(&receipt) && !k.contains("/no/such"))
    );

    assert_eq!(
        get(
            &after,
            "herma_http_request_duration_seconds_count{route=\"/v1/messages\",action=\"shimmed\"}"
        ),
        2.0
    );
    assert_eq!(
        get(
            &after,
            "herma_http_request_duration_seconds_bucket{route=\"/v1/messages\",action=\"shimmed\",le=\"+Inf\"}"
        ),
        2.0
    );
    // Added latency: forwarded requests only, per protocol and action.
    assert_eq!(
        get(
            &after,
            "herma_added_latency_seconds_count{protocol=\"messages\",action=\"shimmed\"}"
        ),
        2.0
    );
    assert_eq!(
        get(
            &after,
            "herma_added_latency_seconds_count{protocol=\"messages\",action=\"forwarded\"}"
        ),
        1.0
    );
    assert!(
        !after
            .keys()
            .any(|k| k.starts_with("herma_added_latency") && k.contains("responded_directly"))
    );
    let added = get(
        &after,
        "herma_added_latency_seconds_sum{protocol=\"messages\",action=\"shimmed\"}",
    );
    let total = get(
        &after,
        "herma_http_request_duration_seconds_sum{route=\"/v1/messages\",action=\"shimmed\"}",
    );
    assert!(
        added > 0.0 && added <= total,
        "Herma's share ({added}) is part of the whole ({total})"
    );

    // The first proxied request compiled the caller's rules.
    assert_eq!(
        get(&after, "herma_rule_index_rebuilds_total"),
        rebuilds + 1.0
    );
    let update = json!({"expected_version": 1, "id": "deploy", "action": "shim_context", "triggers": {"keywords": ["deploy", "ship"]}, "context_refs": ["deploy.checklist"]});
    assert_eq!(
        req(Method::PUT, "/v1/provisions/deploy")
            .key(&key)
            .harness("claude-code")
            .json(update)
            .send(&app)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(proxied("ship it").send(&app).await.0, StatusCode::OK);
    assert_eq!(
        get(&metrics(&app).await, "herma_rule_index_rebuilds_total"),
        rebuilds + 2.0
    );

    app.app.receipts.flush().await;
    let flushed = metrics(&app).await;
    assert_eq!(get(&flushed, "herma_receipt_queue_depth"), 0.0);
    assert!(flushed.contains_key("herma_memory_queue_depth"));
    assert!(flushed.contains_key("herma_build_info{version=\"0.1.0\"}"));
}

#[tokio::test]
async fn metrics_can_require_a_token() {
    let token = "metrics-token-metrics-token-1";
    let app = spawn_app(Backend::Memory, &[("HERMA_METRICS_TOKEN", token)]).await;
    let refused = req(Method::GET, "/metrics").send(&app).await;
    assert_problem(&refused, StatusCode::UNAUTHORIZED, "unauthorized");
    let wrong = req(Method::GET, "/metrics")
        .header("authorization", "Bearer nope")
        .send(&app)
        .await;
    assert_eq!(wrong.0, StatusCode::UNAUTHORIZED);
    let response = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let page = response.text().await.unwrap();
    assert!(samples(&page).contains_key("herma_receipt_queue_depth"));
}
