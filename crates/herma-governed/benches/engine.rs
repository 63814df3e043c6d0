//! The engine's own overhead per call: a provider that answers instantly in process, so what
//! is measured is the engine (and, on SQLite and PostgreSQL, its store round trips).
//!
//! `bare` drains the same provider stream without the engine: the baseline the others are
//! reported against. `memory` is the engine with store round trips excluded (in-process
//! ports); `sqlite` and `postgres` include them (PostgreSQL only when
//! `HERMA_TEST_DATABASE_URL` or the local test database answers).
//!
//! cargo bench -p herma-governed --bench engine

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::StreamExt;
use herma_core::CallerScope;
use herma_core::call::{Controls, ModelEvent, ModelRequest, Msg, StopReason, Unsupported, Usage};
use herma_core::wire::Protocol;
use herma_governed::ports::GovernedPorts;
use herma_governed::{
    Collector, CollectorLimits, GovernedStepRunner, LoadedRequest, OperationCallInput, Prices,
    SingleCallConfig, SingleCallRunner, StepConfig, StepRun, TextRun,
};
use herma_providers::single::{EventStream, ModelClient, ProviderError};
use herma_store::MemoryGovernedStore;
use herma_store::governed::{RootOpen, RootRecord, RootStatus};

/// Answers at once: reference, two text deltas, stop, usage.
struct Immediate;

fn events() -> Vec<Result<ModelEvent, ProviderError>> {
    vec![
        Ok(ModelEvent::Reference("msg".into())),
        Ok(ModelEvent::TextDelta("Hello, ".into())),
        Ok(ModelEvent::TextDelta("world.".into())),
        Ok(ModelEvent::Stop(StopReason::EndTurn)),
        Ok(ModelEvent::Usage(Usage {
            input_tokens: 500,
            output_tokens: 20,
            ..Usage::default()
        })),
    ]
}

#[async_trait]
impl ModelClient for Immediate {
    fn provider_name(&self) -> &'static str {
        Protocol::Messages.provider_name()
    }
    fn attempts_per_dispatch(&self) -> u32 {
        1
    }
    fn validate(&self, request: &ModelRequest) -> Result<(), Unsupported> {
        Protocol::Messages.validate(request)
    }
    async fn dispatch(&self, _: &ModelRequest) -> Result<EventStream, ProviderError> {
        Ok(Box::pin(futures_util::stream::iter(events())))
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn key() -> String {
    format!("bench-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn text_runner(ports: GovernedPorts) -> SingleCallRunner {
    let mut config = SingleCallConfig::new(
        ports,
        Arc::new(Immediate),
        "claude-bench",
        std::sync::Arc::new(herma_store::TokioRuntime),
    );
    config.prices = Prices {
        input_per_mtok: 3_000_000,
        output_per_mtok: 15_000_000,
        ..Prices::default()
    };
    SingleCallRunner::new(config).unwrap()
}

fn text_run() -> TextRun {
    TextRun {
        scope: CallerScope::system_builtin(),
        session_id: "bench".into(),
        operation_key: key(),
        input_revision: "r".into(),
        intent: "answer".into(),
        cancel: None,
        tool_choice: None,
        load_input: Box::new(|| Box::pin(async { Ok(vec![Msg::user("Say hello.")]) })),
    }
}

async fn postgres_ports() -> Option<GovernedPorts> {
    let url = herma_store_postgres::testing::test_database_url();
    let schema = herma_store_postgres::testing::fresh_schema_name();
    let store = herma_store_postgres::connect_in_schema(&url, &schema)
        .await
        .ok()?;
    herma_store::Store::migrate(&store).await.ok()?;
    Some(GovernedPorts::uniform(Arc::new(store)))
}

fn engine(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("governed_call");

    group.bench_function("bare", |b| {
        b.to_async(&rt).iter(|| async {
            let request = ModelRequest {
                call: None,
                system: None,
                messages: vec![Msg::user("Say hello.")],
                tools: Vec::new(),
                output: None,
                controls: Controls {
                    model: "claude-bench".into(),
                    max_tokens: 1024,
                    temperature: None,
                    tool_choice: None,
                    cache: None,
                },
            };
            Immediate.validate(&request).unwrap();
            let mut stream = Immediate.dispatch(&request).await.unwrap();
            let mut collector = Collector::new(CollectorLimits {
                tools: None,
                provider_blocks: false,
                max_output_chars: 100_000,
                max_consecutive_reasoning: None,
            });
            while let Some(Ok(event)) = stream.next().await {
                collector.feed(event);
            }
            collector.finish()
        })
    });

    let memory = text_runner(GovernedPorts::uniform(Arc::new(MemoryGovernedStore::new())));
    group.bench_function("text/memory", |b| {
        b.to_async(&rt)
            .iter(|| async { memory.run(text_run()).await.unwrap() })
    });

    let step_ports = GovernedPorts::uniform(Arc::new(MemoryGovernedStore::new()));
    let step = GovernedStepRunner::new(StepConfig::new(
        step_ports.clone(),
        Arc::new(Immediate),
        std::sync::Arc::new(herma_store::TokioRuntime),
    ))
    .unwrap();
    let scope = CallerScope::system_builtin();
    rt.block_on(async {
        let root = RootRecord {
            scope: scope.clone(),
            root_key: "bench-root".into(),
            binding: serde_json::json!({}),
            status: RootStatus::Active,
            deadline_at: herma_core::Timestamp::from_millis(i64::MAX / 2),
            reserved_calls: 0,
            settled_micros: 0,
            receipts: 0,
            created_at: herma_core::Timestamp::from_millis(0),
            closed_at: None,
        };
        assert!(matches!(
            step_ports.trees.open_root(&root).await.unwrap(),
            RootOpen::Opened(_)
        ));
    });
    group.bench_function("step/memory", |b| {
        b.to_async(&rt).iter(|| async {
            step.run(StepRun {
                call: OperationCallInput {
                    scope: scope.clone(),
                    root_key: "bench-root".into(),
                    operation_key: key(),
                    session_id: "bench".into(),
                    intent: "step".into(),
                    input_revision: "r".into(),
                    policy_version: "p".into(),
                    price_version: "p".into(),
                    output_contract_version: "o".into(),
                    prices: Prices::default(),
                    controls: Controls {
                        model: "claude-bench".into(),
                        max_tokens: 1024,
                        temperature: None,
                        tool_choice: None,
                        cache: None,
                    },
                    deadline_at: herma_core::Timestamp::from_millis(i64::MAX / 2),
                    client: None,
                },
                rationale: "bench".into(),
                cancel: None,
                load_request: Box::new(|| {
                    Box::pin(async {
                        Ok(LoadedRequest {
                            system: None,
                            messages: vec![Msg::user("Say hello.")],
                            tools: Vec::new(),
                            tool_choice: None,
                        })
                    })
                }),
            })
            .await
            .unwrap()
        })
    });

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    let sqlite = rt.block_on(async {
        herma_store_sqlite::open_migrated(path.to_str().unwrap())
            .await
            .unwrap()
    });
    let sqlite = text_runner(GovernedPorts::uniform(Arc::new(sqlite)));
    group.bench_function("text/sqlite", |b| {
        b.to_async(&rt)
            .iter(|| async { sqlite.run(text_run()).await.unwrap() })
    });

    if let Some(ports) = rt.block_on(postgres_ports()) {
        let postgres = text_runner(ports);
        group.bench_function("text/postgres", |b| {
            b.to_async(&rt)
                .iter(|| async { postgres.run(text_run()).await.unwrap() })
        });
    } else {
        eprintln!("PostgreSQL does not answer: text/postgres skipped");
    }
    group.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
