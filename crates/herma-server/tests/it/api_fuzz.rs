//! API fuzzing from the OpenAPI document: schemathesis (PyPI, pinned in
//! `scripts/requirements-test.txt`) reads `/openapi.json` of a real server on SQLite and explores
//! every documented operation, with a key that has every scope and without one. Each response
//! must be no server error, of a documented status and content type, and match its documented
//! schema (problems: `application/problem+json` with one of the documented `type` URIs).
//! Schemathesis' settings and the few deliberate exceptions are in `tests/schemathesis.toml`;
//! `docs/reliability.md` says how to run a longer fuzz by hand.

use std::path::PathBuf;
use std::process::Command;

use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::Method;

use crate::req;

/// Test cases per operation and phase in CI (`HERMA_API_FUZZ_EXAMPLES` raises it for a longer run).
const CI_EXAMPLES: &str = "10";

fn config() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis.toml")
}

fn examples() -> String {
    #[allow(clippy::disallowed_methods)] // the test command chooses the length of the run
    std::env::var("HERMA_API_FUZZ_EXAMPLES").unwrap_or_else(|_| CI_EXAMPLES.to_owned())
}

/// Runs schemathesis against `app` with `args` and returns its exit status and output.
async fn schemathesis(app: &TestApp, args: Vec<String>) -> (bool, String) {
    let interpreter = crate::sdk::python();
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(&interpreter);
    command
        .current_dir(dir.path())
        .args(["-m", "schemathesis.cli", "--config-file"])
        .arg(config())
        .args(["run", &app.url("/openapi.json")])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance",
            "--max-examples",
            &examples(),
            "--generation-deterministic",
            "--workers",
            "1",
            "--no-color",
        ])
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("SCHEMATHESIS_HOOKS");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e} (scripts/test installs schemathesis into .venv)",
                interpreter.display()
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// The summary's `Selected: N/M` and `Tested: T` figures.
fn operation_figures(output: &str) -> Option<(usize, usize, usize)> {
    let figure = |prefix: &str| {
        output
            .lines()
            .find_map(|line| line.trim().strip_prefix(prefix).map(str::to_owned))
    };
    let selected = figure("Selected: ")?;
    let (selected, total) = selected.split_once('/')?;
    let tested = figure("Tested: ")?;
    Some((
        selected.trim().parse().ok()?,
        total.trim().parse().ok()?,
        tested.trim().parse().ok()?,
    ))
}

async fn documented_operations(app: &TestApp) -> usize {
    let doc = req(Method::GET, "/openapi.json").send(app).await.2;
    doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_failure_in_any_documented_operation() {
    let app = spawn_app(
        Backend::Sqlite,
        &[
            ("HERMA_ADMIN_TOKEN", "bootstrap-token-0123456789abcdef"),
            // The preview's per-address limit would otherwise answer (a documented) 429 to
            // nearly every generated preview.
            ("HERMA_PREVIEW_RATE_PER_MINUTE", "1000000"),
        ],
    )
    .await;
    let key = app.key("route,configure,admin", Some("claude-code")).await;
    let operations = documented_operations(&app).await;
    assert!(operations >= 40, "{operations} operations documented");

    let runs = [
        (
            "with a key of every scope",
            vec![
                "-H".to_owned(),
                format!("Authorization: Bearer {key}"),
                "-H".to_owned(),
                "X-Herma-Harness: claude-code".to_owned(),
                // The key is given; generated credentials beside it would only be refused as
                // ambiguous (the run without a key covers the gate).
                "--generation-with-security-parameters".to_owned(),
                "false".to_owned(),
            ],
        ),
        ("without a key", Vec::new()),
    ];
    for (run, args) in runs {
        let (passed, output) = schemathesis(&app, args).await;
        // The figures of the run (shown with `--nocapture`): test cases generated and passed.
        if let Some(figures) = output
            .lines()
            .skip_while(|line| !line.starts_with("Test cases:"))
            .nth(1)
        {
            println!("schemathesis {run}: {}", figures.trim());
        }
        assert!(passed, "schemathesis found failures {run}:\n{output}");
        let (selected, total, tested) = operation_figures(&output)
            .unwrap_or_else(|| panic!("schemathesis printed no summary {run}:\n{output}"));
        assert!(
            selected == total && tested == total && total >= 40,
            "schemathesis explored every operation of the document {run}:\n{output}"
        );
    }
}
