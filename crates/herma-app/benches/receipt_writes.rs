//! Receipts cost: sealing one (canonical JSON + SHA-256), and writing a batch of 100 to SQLite
//! with time-ordered ids (what the receipt writer does under load).

// A benchmark fails loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use herma_core::model::{MatchedRule, ReceiptAction, ReceiptBody, Tier, Timings};
use herma_core::{CallerScope, Timestamp};

fn bench(c: &mut Criterion) {
    let (rt, store, _dir) = support::sqlite_store();
    let scope = CallerScope::parse("key:0123456789abcdef").unwrap();
    let body = ReceiptBody {
        caller_scope: scope,
        protocol: "chat_completions".into(),
        conversation_id: "fm:0123456789abcdef".into(),
        model: "bench-model".into(),
        action: ReceiptAction::Shimmed,
        matched: vec![MatchedRule {
            provision_id: "bench.deploy".into(),
            version: 1,
            builtin: false,
            tier: Tier::Keyword,
            trigger: "keyword:deploy".into(),
            applied: true,
            score: None,
            confidence: None,
        }],
        shimmed_context_refs: vec![],
        unresolved_context_refs: vec![],
        upstream_status: Some(200),
        usage: Some(
            serde_json::json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18})
                .into(),
        ),
        timings: Timings {
            decision_micros: 30,
            upstream_headers_micros: Some(120),
            total_micros: Some(150),
        },
        stream_end: None,
        error: None,
        created_at: Timestamp::from_millis(1),
    };
    let mut n = 0u64;
    c.bench_function("seal receipt", |b| {
        b.iter(|| body.clone().seal("rcpt_x".into()))
    });
    c.bench_function("insert 100 receipts (sqlite)", |b| {
        b.iter(|| {
            let batch: Vec<_> = (0..100)
                .map(|_| {
                    n += 1;
                    body.clone().seal(format!("rcpt_{n:012x}{:020x}", n * 7919))
                })
                .collect();
            rt.block_on(store.insert_receipts(&batch)).unwrap();
        })
    });
}
criterion_group!(benches, bench);
criterion_main!(benches);
