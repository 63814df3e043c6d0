//! Authenticating a request: the warm path must cost no database round trip.
//!
//! Reported (not asserted): `warm cache` against `cold cache (SQLite read)`, measured in the same
//! run, and the floor — parsing and hashing the presented key alone.

// Tests fail loudly: unwrap and expect are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use herma_app::App;
use herma_app::clock::OsRandom;
use herma_app::keys::NewKey;
use herma_core::gate::GateRequest;
use herma_core::key::{PresentedKey, Scopes};
use herma_core::settings::Settings;
use herma_core::time::ManualClock;
use herma_store::Store;

fn bench_gate(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bench.db");
    let (app, clock, key) = rt.block_on(async {
        let store: Arc<dyn Store> = Arc::new(
            herma_store_sqlite::open_migrated(path.to_str().expect("path"))
                .await
                .expect("sqlite"),
        );
        let clock = ManualClock::at(1_796_000_000_000);
        let settings = Settings::from_map(&Default::default()).expect("settings");
        let second = std::time::Duration::from_secs(1);
        let upstream: Arc<dyn herma_providers::Upstream> = Arc::new(
            herma_providers::HttpUpstream::new(second, second, second).expect("http client"),
        );
        let app = App::with_parts(
            store,
            settings,
            clock.clone(),
            Arc::new(OsRandom),
            upstream,
            Arc::new(herma_store::TokioRuntime),
        );
        let issued = app
            .issue_key(NewKey {
                scopes: Scopes::parse_list("route", "s").expect("scopes"),
                harness: None,
                label: String::new(),
                cohorts: Vec::new(),
            })
            .await
            .expect("key");
        (app, clock, issued.key)
    });
    let bearer = format!("Bearer {key}");
    let request = GateRequest {
        authorization: Some(&bearer),
        ..GateRequest::default()
    };

    let mut group = c.benchmark_group("authenticate");
    group.bench_function("warm cache", |b| {
        b.to_async(&rt)
            .iter(|| async { app.gate.authenticate(&request).await.expect("valid key") })
    });
    group.bench_function("cold cache (SQLite read)", |b| {
        b.to_async(&rt).iter(|| async {
            // Past the cache's lifetime, so every iteration reads the key again.
            clock.advance_millis(2_000);
            app.gate.authenticate(&request).await.expect("valid key")
        })
    });
    group.bench_function("parse and hash only", |b| {
        b.iter(|| PresentedKey::parse(&key).expect("key"))
    });
    group.finish();
}

criterion_group!(benches, bench_gate);
criterion_main!(benches);
