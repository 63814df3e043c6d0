//! Operational metrics, rendered in the Prometheus text format (version 0.0.4) by `GET /metrics`.
//!
//! The transport records each request ([`Metrics::record_request`]) and, for proxied requests,
//! the time Herma spent before handing the request to the upstream
//! ([`Metrics::record_added_latency`]). Queue depths and rebuild counts are read from their
//! owners at render time. Recording is a read-locked map lookup and a few relaxed atomic adds.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use herma_core::model::{ReceiptAction, StreamEnd};
use herma_core::wire::Protocol;
use herma_core::{Problem, ProblemCode};

use crate::App;

/// Upper bounds (seconds) of the request-latency buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];
/// Upper bounds (seconds) of Herma's added latency: finer, it should stay under a millisecond.
const ADDED_BUCKETS: [f64; 12] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];

/// Classifier outcomes, for the `outcome` label.
pub const CLASSIFIER_OUTCOMES: [&str; 5] = ["decided", "malformed", "failed", "refused", "skipped"];

/// What a request did, for the `action` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestAction {
    /// Not a proxied model request.
    None,
    Forwarded,
    Shimmed,
    RespondedDirectly,
    /// A proxied request Herma refused or could not complete (the status tells which).
    Failed,
}

impl RequestAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestAction::None => "none",
            RequestAction::Forwarded => "forwarded",
            RequestAction::Shimmed => "shimmed",
            RequestAction::RespondedDirectly => "responded_directly",
            RequestAction::Failed => "failed",
        }
    }
}

impl From<ReceiptAction> for RequestAction {
    fn from(action: ReceiptAction) -> Self {
        match action {
            ReceiptAction::Forwarded => RequestAction::Forwarded,
            ReceiptAction::Shimmed => RequestAction::Shimmed,
            ReceiptAction::RespondedDirectly => RequestAction::RespondedDirectly,
        }
    }
}

/// What the proxy tells the transport about a request it handled, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyOutcome {
    pub protocol: &'static str,
    pub action: RequestAction,
    /// Microseconds from receiving the request to handing it to the upstream (forwarded
    /// requests only).
    pub added_micros: Option<u64>,
}

struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    fn observe(&self, micros: u64) {
        #[allow(clippy::cast_precision_loss)] // microseconds fit an f64 exactly up to 2^53
        let seconds = micros as f64 / 1e6;
        if let Some(i) = self.bounds.iter().position(|b| seconds <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let (lead, set) = if labels.is_empty() {
            (String::new(), String::new())
        } else {
            (format!("{labels},"), format!("{{{labels}}}"))
        };
        let mut cumulative = 0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{lead}le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{lead}le=\"+Inf\"}} {count}");
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{set} {sum}");
        let _ = writeln!(out, "{name}_count{set} {count}");
    }
}

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct CountKey {
    route: Arc<str>,
    method: &'static str,
    action: &'static str,
    status: u16,
}

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct LatencyKey {
    route: Arc<str>,
    action: &'static str,
}

/// A map of series by their labels. The labels are route templates (not raw paths), normalized
/// methods, statuses and fixed names: a bounded set no caller chooses, so foldhash's fast hash
/// (a fixed seed) serves where std's SipHash would cost more than the count itself.
type Series<K, V> = RwLock<HashMap<K, V, foldhash::fast::FixedState>>;

/// The registry.
pub struct Metrics {
    requests: Series<CountKey, AtomicU64>,
    latency: Series<LatencyKey, Histogram>,
    added: Series<(&'static str, &'static str), Histogram>,
    /// Tier 2: time embedding a request (only requests that needed it).
    embeds: Histogram,
    /// Tier 3: classifier outcomes, by `CLASSIFIER_OUTCOMES` index.
    classifier: [AtomicU64; 5],
    /// How forwarded response bodies ended, by protocol and end.
    pub stream_ends: Arc<StreamEnds>,
}

/// Forwarded response bodies by protocol and how they ended (`herma_proxy_response_ends_total`).
#[derive(Default)]
pub struct StreamEnds([[AtomicU64; 5]; 3]);

const PROTOCOLS: [Protocol; 3] = [
    Protocol::ChatCompletions,
    Protocol::Responses,
    Protocol::Messages,
];

impl StreamEnds {
    pub fn record(&self, protocol: Protocol, end: StreamEnd) {
        let p = PROTOCOLS.iter().position(|known| *known == protocol);
        let e = StreamEnd::ALL.iter().position(|known| *known == end);
        if let (Some(p), Some(e)) = (p, e) {
            self.0[p][e].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn render(&self, out: &mut String) {
        out.push_str("# HELP herma_proxy_response_ends_total Forwarded response bodies by protocol and how they ended: completed, upstream_closed_early (a stream without its last event), idle_timeout, upstream_error, client_gone.\n# TYPE herma_proxy_response_ends_total counter\n");
        for (protocol, row) in PROTOCOLS.iter().zip(&self.0) {
            for (end, count) in StreamEnd::ALL.iter().zip(row) {
                let _ = writeln!(
                    out,
                    "herma_proxy_response_ends_total{{protocol=\"{}\",end=\"{}\"}} {}",
                    protocol.as_str(),
                    end.as_str(),
                    count.load(Ordering::Relaxed)
                );
            }
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: RwLock::default(),
            latency: RwLock::default(),
            added: RwLock::default(),
            embeds: Histogram::new(&LATENCY_BUCKETS),
            classifier: Default::default(),
            stream_ends: Arc::default(),
        }
    }
}

/// Applies `record` to `key`'s series under the read lock; inserts the series (`make`) under
/// the write lock only the first time. A poisoned lock skips the record.
fn series<K: std::hash::Hash + Eq + Clone, V>(
    map: &Series<K, V>,
    key: &K,
    make: impl FnOnce() -> V,
    record: impl FnOnce(&V),
) {
    if let Ok(map) = map.read()
        && let Some(found) = map.get(key)
    {
        record(found);
        return;
    }
    if let Ok(mut map) = map.write() {
        record(map.entry(key.clone()).or_insert_with(make));
    }
}

/// A label value, escaped as the text format requires.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Methods as static strings (anything unusual is `other`, keeping the label set bounded).
pub fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

impl Metrics {
    /// One request: `route` is the matched route template (never the raw path, so ids do not
    /// multiply series), `micros` the time until the response headers were ready.
    pub fn record_request(
        &self,
        route: Arc<str>,
        method: &'static str,
        status: u16,
        action: RequestAction,
        micros: u64,
    ) {
        let key = CountKey {
            route: route.clone(),
            method,
            action: action.as_str(),
            status,
        };
        series(
            &self.requests,
            &key,
            || AtomicU64::new(0),
            |counter| {
                counter.fetch_add(1, Ordering::Relaxed);
            },
        );
        let key = LatencyKey {
            route,
            action: action.as_str(),
        };
        series(
            &self.latency,
            &key,
            || Histogram::new(&LATENCY_BUCKETS),
            |histogram| histogram.observe(micros),
        );
    }

    /// Herma's own time before the upstream was called, for a forwarded request.
    pub fn record_added_latency(&self, protocol: &'static str, action: RequestAction, micros: u64) {
        let key = (protocol, action.as_str());
        series(
            &self.added,
            &key,
            || Histogram::new(&ADDED_BUCKETS),
            |histogram| histogram.observe(micros),
        );
    }

    /// One request's tier-2 embedding time and tier-3 outcomes.
    pub fn record_tiers(&self, evaluation: &herma_core::evaluation::Evaluation) {
        if evaluation.embedding_model.is_some() {
            self.embeds.observe(evaluation.embed_micros);
        }
        for m in &evaluation.micromodel {
            if let Some(i) = CLASSIFIER_OUTCOMES.iter().position(|k| *k == m.result) {
                self.classifier[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn render_series(&self, out: &mut String) {
        out.push_str("# HELP herma_http_requests_total Requests by route template, method, action and status.\n# TYPE herma_http_requests_total counter\n");
        if let Ok(map) = self.requests.read() {
            let mut rows: Vec<_> = map.iter().collect();
            rows.sort_by(|a, b| a.0.cmp(b.0));
            for (k, v) in rows {
                let _ = writeln!(
                    out,
                    "herma_http_requests_total{{route=\"{}\",method=\"{}\",action=\"{}\",status=\"{}\"}} {}",
                    label(&k.route),
                    k.method,
                    k.action,
                    k.status,
                    v.load(Ordering::Relaxed)
                );
            }
        }
        out.push_str("# HELP herma_http_request_duration_seconds Time from receiving a request to its response headers (the first byte of a stream).\n# TYPE herma_http_request_duration_seconds histogram\n");
        if let Ok(map) = self.latency.read() {
            let mut rows: Vec<_> = map.iter().collect();
            rows.sort_by(|a, b| a.0.cmp(b.0));
            for (k, h) in rows {
                let labels = format!("route=\"{}\",action=\"{}\"", label(&k.route), k.action);
                h.render(out, "herma_http_request_duration_seconds", &labels);
            }
        }
        out.push_str("# HELP herma_added_latency_seconds Herma's own time on a forwarded request: from receiving it to handing it to the upstream (authentication, reading, rules, shim).\n# TYPE herma_added_latency_seconds histogram\n");
        if let Ok(map) = self.added.read() {
            let mut rows: Vec<_> = map.iter().collect();
            rows.sort_by(|a, b| a.0.cmp(b.0));
            for ((protocol, action), h) in rows {
                let labels = format!("protocol=\"{protocol}\",action=\"{action}\"");
                h.render(out, "herma_added_latency_seconds", &labels);
            }
        }
        out.push_str("# HELP herma_semantic_embed_seconds Time embedding a request's latest user turn for semantic rules (cache hits included; requests tier 1 decided are not embedded).\n# TYPE herma_semantic_embed_seconds histogram\n");
        self.embeds.render(out, "herma_semantic_embed_seconds", "");
        out.push_str("# HELP herma_classifier_outcomes_total Micromodel rules by what came of the classifier: decided, malformed, failed (timeout, 429, error), refused (contributor tier), skipped (offline, not configured).\n# TYPE herma_classifier_outcomes_total counter\n");
        for (name, count) in CLASSIFIER_OUTCOMES.iter().zip(&self.classifier) {
            let _ = writeln!(
                out,
                "herma_classifier_outcomes_total{{outcome=\"{name}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        self.stream_ends.render(out);
    }
}

impl App {
    /// `GET /metrics`: with `HERMA_METRICS_TOKEN` set, only for `Authorization: Bearer <token>`.
    pub fn metrics_page(&self, authorization: Option<&str>) -> Result<String, Problem> {
        if let Some(expected) = &self.settings.metrics_token {
            let presented = authorization
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default();
            if !herma_core::gate::secrets_match(expected.expose(), presented) {
                return Err(Problem::new(
                    ProblemCode::Unauthorized,
                    "GET /metrics needs `Authorization: Bearer` with HERMA_METRICS_TOKEN",
                ));
            }
        }
        Ok(self.render_metrics())
    }

    /// Everything `GET /metrics` shows, in the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let mut out = String::with_capacity(4096);
        self.metrics.render_series(&mut out);
        let gauge = |out: &mut String, name: &str, kind: &str, help: &str, value: u64| {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            );
        };
        gauge(
            &mut out,
            "herma_receipt_queue_depth",
            "gauge",
            "Receipts waiting to be written.",
            u64::try_from(self.receipts.depth()).unwrap_or(u64::MAX),
        );
        gauge(
            &mut out,
            "herma_rule_index_rebuilds_total",
            "counter",
            "Times a caller's rule index was compiled (first use or a changed provision).",
            self.rules.rebuilds(),
        );
        if let Some(memory) = &self.memory {
            gauge(
                &mut out,
                "herma_memory_queue_depth",
                "gauge",
                "Turns waiting for entity extraction.",
                u64::try_from(memory.depth()).unwrap_or(u64::MAX),
            );
            gauge(
                &mut out,
                "herma_memory_turns_skipped_total",
                "counter",
                "Turns not remembered because the memory queue was full.",
                memory.dropped(),
            );
        }
        let _ = write!(
            out,
            "# HELP herma_build_info The running Herma.\n# TYPE herma_build_info gauge\nherma_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_count_everything() {
        let h = Histogram::new(&ADDED_BUCKETS);
        for micros in [40, 90, 90, 700, 5_000_000] {
            h.observe(micros);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"");
        assert!(
            out.contains("x_bucket{a=\"b\",le=\"0.00005\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.0001\"} 3\n"));
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.001\"} 4\n"));
        assert!(out.contains("x_bucket{a=\"b\",le=\"1\"} 4\n"));
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 5\n"));
        assert!(out.contains("x_count{a=\"b\"} 5\n"));
        assert!(out.contains("x_sum{a=\"b\"} 5.00092\n"));
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn requests_are_counted_per_series() {
        let m = Metrics::default();
        let route: Arc<str> = Arc::from("/v1/messages");
        m.record_request(route.clone(), "POST", 200, RequestAction::Shimmed, 800);
        m.record_request(route.clone(), "POST", 200, RequestAction::Shimmed, 900);
        m.record_request(route, "POST", 502, RequestAction::Failed, 900);
        let mut out = String::new();
        m.render_series(&mut out);
        assert!(out.contains("herma_http_requests_total{route=\"/v1/messages\",method=\"POST\",action=\"shimmed\",status=\"200\"} 2\n"), "{out}");
        assert!(out.contains("herma_http_requests_total{route=\"/v1/messages\",method=\"POST\",action=\"failed\",status=\"502\"} 1\n"));
        assert!(out.contains("herma_http_request_duration_seconds_count{route=\"/v1/messages\",action=\"shimmed\"} 2\n"));
    }
}
