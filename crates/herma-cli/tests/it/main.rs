//! The `herma` binary as a new user runs it: a fresh directory, no configuration.

// Tests fail loudly: unwrap and expect are how they report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

mod crash;
mod processes;

const HERMA: &str = env!("CARGO_BIN_EXE_herma");

/// `herma …` in `dir` with no HERMA_* settings but `env`.
fn herma(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(HERMA);
    cmd.current_dir(dir).args(args);
    for (name, _) in std::env::vars() {
        if name.starts_with("HERMA_") {
            cmd.env_remove(name);
        }
    }
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd
}

fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    herma(dir, args, env).output().expect("run herma")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A running `herma serve`, with the address it logged.
struct Server {
    child: Child,
    base: String,
    /// What it logged up to and including the listening line.
    startup: Vec<String>,
    logs: mpsc::Receiver<String>,
}

impl Server {
    #[allow(clippy::zombie_processes)] // the child moves into `Server`, whose Drop kills and waits
    fn start(dir: &Path, env: &[(&str, &str)]) -> Self {
        let mut child = herma(dir, &["serve", "--bind", "127.0.0.1:0"], env)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn herma serve");
        let (tx, logs) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut startup = Vec::new();
        loop {
            let line = logs
                .recv_timeout(Duration::from_secs(60))
                .expect("herma serve logs where it listens");
            startup.push(line.clone());
            if let Some(rest) = line.split("herma listening on ").nth(1) {
                // Text logs end the address with a space, JSON logs with a quote.
                let base = rest
                    .split(|c: char| c.is_whitespace() || c == '"')
                    .next()
                    .expect("address")
                    .to_owned();

                return Self {
                    child,
                    base,
                    startup,
                    logs,
                };
            }
        }
    }

    /// SIGTERM, then the exit status and the remaining logs.
    fn terminate(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        let status = self.child.wait().expect("wait");
        // Every line the process wrote: the reader thread ends at the closed pipe.
        (status, self.logs.iter().collect())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn issue_key(dir: &Path, env: &[(&str, &str)]) -> Value {
    let out = run(
        dir,
        &[
            "keys",
            "create",
            "--scope",
            "route,configure",
            "--harness",
            "claude-code",
            "--json",
        ],
        env,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("keys create --json prints JSON")
}

/// Creates, reads, updates and stale-updates records the way the README shows with curl.
async fn new_user_flow(dir: &Path, env: &[(&str, &str)]) {
    let server = Server::start(dir, env);
    let client = reqwest::Client::new();
    let health: Value = client
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");

    let key = issue_key(dir, env);
    let secret = key["key"].as_str().unwrap();
    assert!(secret.starts_with("hmk_"));
    assert_eq!(
        key["caller_scope"],
        format!("key:{}", key["key_id"].as_str().unwrap())
    );
    assert_eq!(key["scopes"], json!(["route", "configure"]));

    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut r = client
            .request(method, format!("{}{path}", server.base))
            .bearer_auth(secret)
            .header("X-Herma-Harness", "claude-code");
        if let Some(body) = body {
            r = r.json(&body);
        }
        r.send()
    };
    let entry = json!({"id": "deploy.checklist", "kind": "verb", "schema_or_body": "Run the migrations before the canary."});
    let created = call(reqwest::Method::POST, "/v1/context", Some(entry))
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let provision = json!({"id": "deploy", "action": "shim_context", "triggers": {"keywords": ["deploy"]}, "context_refs": ["deploy.checklist"]});
    assert_eq!(
        call(
            reqwest::Method::POST,
            "/v1/provisions",
            Some(provision.clone())
        )
        .await
        .unwrap()
        .status(),
        201
    );
    let read: Value = call(reqwest::Method::GET, "/v1/provisions/deploy", None)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(read["version"], 1);
    let mut update = provision.clone();
    update["expected_version"] = json!(1);
    update["triggers"]["keywords"] = json!(["deploy", "ship it"]);
    let updated = call(
        reqwest::Method::PUT,
        "/v1/provisions/deploy",
        Some(update.clone()),
    )
    .await
    .unwrap();
    assert_eq!(updated.status(), 200);
    let stale = call(reqwest::Method::PUT, "/v1/provisions/deploy", Some(update))
        .await
        .unwrap();
    assert_eq!(stale.status(), 409);
    assert_eq!(stale.headers()["content-type"], "application/problem+json");
    let problem: Value = stale.json().await.unwrap();
    assert_eq!(
        (problem["code"].clone(), problem["current_version"].clone()),
        (json!("version_conflict"), json!(2))
    );

    let (status, logs) = server.terminate();
    assert!(status.success(), "graceful shutdown exits 0: {status:?}");
    assert!(logs.iter().any(|l| l.contains("herma stopped")), "{logs:?}");
}

#[tokio::test]
async fn a_fresh_directory_needs_no_configuration() {
    let dir = tempfile::tempdir().unwrap();
    new_user_flow(dir.path(), &[]).await;
    assert!(
        dir.path().join("herma.db").exists(),
        "the default database is ./herma.db"
    );
    // Restarting keeps everything and loads the starters without new versions.
    let server = Server::start(dir.path(), &[]);
    let (status, _) = server.terminate();
    assert!(status.success());
}

#[tokio::test]
async fn the_same_works_on_postgres() {
    let schema = herma_test_support::fresh_schema_name();
    let base = herma_test_support::test_database_url();
    // Create the schema, then point the binary at it through the URL's `options`.
    herma_store_postgres_schema(&base, &schema).await;
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
    let dir = tempfile::tempdir().unwrap();
    new_user_flow(dir.path(), &[("HERMA_DATABASE_URL", &url)]).await;
    assert!(
        !dir.path().join("herma.db").exists(),
        "no SQLite file when PostgreSQL is configured"
    );
}

async fn herma_store_postgres_schema(url: &str, schema: &str) {
    herma_test_support::postgres_schema(url, schema)
        .await
        .expect("create the test schema");
}

#[test]
fn first_start_explains_how_to_create_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let startup = server.startup.join("\n");
    // The hint names the binary as it was started (here by its path), so it works when pasted.
    assert!(
        startup.contains(&format!(
            "no keys yet: create one with `{HERMA} keys create"
        )),
        "{startup}"
    );
    assert!(startup.contains("built-in starters loaded"), "{startup}");
    let (status, _) = server.terminate();
    assert!(status.success());
    // With a key issued, the hint is gone.
    issue_key(dir.path(), &[]);
    let server = Server::start(dir.path(), &[]);
    assert!(!server.startup.join("\n").contains("no keys yet"));
}

#[test]
fn config_check_names_every_invalid_setting_and_redacts_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let ok = run(
        dir.path(),
        &["config", "check"],
        &[
            ("HERMA_ADMIN_TOKEN", "a-bootstrap-token-that-is-long-enough"),
            ("HERMA_DATABASE_URL", "postgres://u:hunter2@db/herma"),
        ],
    );
    assert!(ok.status.success(), "{}", stderr(&ok));
    let text = stdout(&ok);
    assert!(
        text.contains("HERMA_ADMIN_TOKEN") && text.contains("[set]"),
        "{text}"
    );
    assert!(text.contains("postgres://u:***@db/herma"), "{text}");
    assert!(
        !text.contains("hunter2") && !text.contains("long-enough"),
        "{text}"
    );

    let bad = run(
        dir.path(),
        &["config", "check"],
        &[
            ("HERMA_BIND", "nowhere"),
            ("HERMA_MAX_BODY_BYTES", "1e6"),
            ("HERMA_BINDD", "typo"),
        ],
    );
    assert_eq!(bad.status.code(), Some(2));
    let all = format!("{}{}", stdout(&bad), stderr(&bad));
    for expected in [
        "HERMA_BIND: `nowhere`",
        "HERMA_MAX_BODY_BYTES: `1e6`",
        "HERMA_BINDD is not a Herma setting",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in {all}");
    }
    let serve = run(
        dir.path(),
        &["serve"],
        &[("HERMA_DATABASE_URL", "mysql://x")],
    );
    assert_eq!(serve.status.code(), Some(2));
    assert!(
        stderr(&serve).contains("HERMA_DATABASE_URL"),
        "{}",
        stderr(&serve)
    );
}

#[test]
fn config_check_aligns_every_value_to_the_longest_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["config", "check"],
        &[("HERMA_CONVERSATION_DISABLED_PROVIDERS", "[\"anthropic\"]")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let columns: Vec<usize> = text
        .lines()
        .filter(|line| line.starts_with("HERMA_"))
        .map(|line| {
            let name_end = line.find(' ').unwrap();
            name_end + line[name_end..].find(|c: char| c != ' ').unwrap()
        })
        .collect();
    assert!(columns.len() > 40, "{text}");
    assert!(columns.iter().all(|c| *c == columns[0]), "{text}");
    let longest = text
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| name.starts_with("HERMA_"))
        .map(str::len)
        .max()
        .unwrap();
    assert_eq!(columns[0], longest + 2, "two spaces after the longest name");
    let disabled = text
        .lines()
        .find(|line| line.starts_with("HERMA_CONVERSATION_DISABLED_PROVIDERS "))
        .unwrap();
    assert!(disabled.ends_with(" [\"anthropic\"]"), "{disabled}");
}

#[test]
fn config_docs_prints_the_declared_tables() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["config", "docs"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), herma_core::settings::docs::markdown());
}

#[test]
fn keys_list_has_a_header_row_aligned_with_its_columns() {
    let dir = tempfile::tempdir().unwrap();
    let key = issue_key(dir.path(), &[]);
    let list = stdout(&run(dir.path(), &["keys", "list"], &[]));
    let mut lines = list.lines();
    let header = lines.next().unwrap();
    let row = lines.next().unwrap();
    assert!(header.starts_with("KEY ID "), "{list}");
    for (title, value) in [
        ("SCOPES", "route,configure"),
        ("HARNESS", "claude-code"),
        ("STATUS", "active"),
    ] {
        assert_eq!(header.find(title), row.find(value), "{title} in\n{list}");
    }
    assert!(row.starts_with(key["key_id"].as_str().unwrap()), "{list}");
}

/// `herma … | head` where the reader is gone before anything is written: every write meets a
/// closed pipe.
fn run_into_a_closed_pipe(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = herma(dir, args, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn herma");
    drop(child.stdout.take());
    child.wait_with_output().expect("wait for herma")
}

#[test]
fn a_reader_that_closes_early_ends_the_output_not_in_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    issue_key(dir.path(), &[]);
    for args in [
        &["keys", "list"][..],
        &["keys", "list", "--json"],
        &["config", "check"],
        &["config", "docs"],
        &["provisions", "export", "--builtin"],
        &["migrate"],
    ] {
        let out = run_into_a_closed_pipe(dir.path(), args, &[]);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
    // The command still ends as it would have: an invalid configuration is still refused.
    let out = run_into_a_closed_pipe(
        dir.path(),
        &["config", "check"],
        &[("HERMA_BIND", "nowhere")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("HERMA_BIND: `nowhere`"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

#[test]
fn provision_import_is_all_or_nothing_and_export_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let key = issue_key(dir.path(), &[]);
    let caller = key["caller_scope"].as_str().unwrap();
    let good = |id: &str| {
        json!({"id": id, "action": "respond_directly", "triggers": {"keywords": [id]}, "response": {"text": "hi"}}).to_string()
    };
    let bad_file = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad_file,
        format!(
            "{}\n{{\"id\":\"x\",\"action\":\"nope\"}}\n{}\n",
            good("a"),
            good("b")
        ),
    )
    .unwrap();
    let out = run(
        dir.path(),
        &[
            "provisions",
            "import",
            bad_file.to_str().unwrap(),
            "--caller",
            caller,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("/1/action") && stderr(&out).contains("line 2"),
        "{}",
        stderr(&out)
    );
    let exported = run(
        dir.path(),
        &[
            "provisions",
            "export",
            "--caller",
            caller,
            "--format",
            "jsonl",
        ],
        &[],
    );
    assert_eq!(stdout(&exported), "", "nothing was imported");

    let records: Vec<String> = (0..500).map(|i| good(&format!("rule-{i:03}"))).collect();
    let good_file = dir.path().join("good.jsonl");
    std::fs::write(&good_file, records.join("\n")).unwrap();
    let out = run(
        dir.path(),
        &[
            "provisions",
            "import",
            good_file.to_str().unwrap(),
            "--caller",
            caller,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("500 created, 0 updated, 0 unchanged"),
        "{}",
        stdout(&out)
    );

    let export_file = dir.path().join("export.json");
    let out = run(
        dir.path(),
        &[
            "provisions",
            "export",
            "--caller",
            caller,
            "-o",
            export_file.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let exported: Vec<Value> =
        serde_json::from_slice(&std::fs::read(&export_file).unwrap()).unwrap();
    assert_eq!(exported.len(), 500);
    assert!(exported[0].get("version").is_none() && exported[0].get("caller_scope").is_none());
    let again = run(
        dir.path(),
        &[
            "provisions",
            "import",
            export_file.to_str().unwrap(),
            "--caller",
            caller,
        ],
        &[],
    );
    assert!(
        stdout(&again).contains("0 created, 0 updated, 500 unchanged"),
        "{}",
        stdout(&again)
    );

    let builtins = run(
        dir.path(),
        &["provisions", "export", "--builtin", "--format", "jsonl"],
        &[],
    );
    assert!(
        stdout(&builtins).lines().count() >= 3,
        "{}",
        stdout(&builtins)
    );
    let nobody = run(
        dir.path(),
        &[
            "provisions",
            "import",
            good_file.to_str().unwrap(),
            "--caller",
            "someone",
        ],
        &[],
    );
    assert_eq!(nobody.status.code(), Some(2));
}

#[test]
fn keys_are_listed_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let key = issue_key(dir.path(), &[]);
    let id = key["key_id"].as_str().unwrap();
    let human = run(dir.path(), &["keys", "create", "--admin"], &[]);
    assert!(
        stdout(&human).contains("This is the only time the key is shown"),
        "{}",
        stdout(&human)
    );
    assert!(stdout(&human).contains("route,admin"), "{}", stdout(&human));
    let list = stdout(&run(dir.path(), &["keys", "list"], &[]));
    assert!(list.contains(id) && list.contains("active"), "{list}");
    assert!(
        !list.contains(key["key"].as_str().unwrap()),
        "secrets are never listed"
    );
    let revoked = run(dir.path(), &["keys", "revoke", id], &[]);
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    assert!(stdout(&run(dir.path(), &["keys", "list"], &[])).contains("revoked"));
    let unknown = run(dir.path(), &["keys", "revoke", "0000000000000000"], &[]);
    assert_eq!(unknown.status.code(), Some(2));
    let bad_scope = run(
        dir.path(),
        &["keys", "create", "--scope", "route,root"],
        &[],
    );
    assert_eq!(bad_scope.status.code(), Some(2));
    assert!(
        stderr(&bad_scope).contains("unknown scope `root`"),
        "{}",
        stderr(&bad_scope)
    );
    let no_harness = run(dir.path(), &["keys", "create", "--scope", "configure"], &[]);
    assert!(
        stderr(&no_harness).contains("/harness"),
        "{}",
        stderr(&no_harness)
    );
}

#[test]
fn migrate_reports_what_it_applied() {
    let dir = tempfile::tempdir().unwrap();
    let first = stdout(&run(dir.path(), &["migrate"], &[]));
    assert!(first.contains("applied migration 1 (initial)"), "{first}");
    assert!(
        first.contains("applied migration 2 (revisions_and_claims)"),
        "{first}"
    );
    assert!(first.contains("applied migration 3 (memory)"), "{first}");

    let second = stdout(&run(dir.path(), &["migrate"], &[]));
    assert!(second.contains("is up to date"), "{second}");
}

/// Logs are structured and carry request ids; keys, tokens and bodies never appear in them, not
/// even at `debug`.
#[tokio::test]
async fn logs_carry_request_ids_and_never_keys_or_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let token = "admin-token-admin-token-admin-1";
    let env = [
        ("HERMA_LOG", "debug"),
        ("HERMA_LOG_FORMAT", "json"),
        ("HERMA_ADMIN_TOKEN", token),
    ];
    let server = Server::start(dir.path(), &env);
    let key = issue_key(dir.path(), &env);
    let secret = key["key"].as_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    let marker = "BODY-MARKER-7f3a";
    let created = client
        .post(format!("{}/v1/context", server.base))
        .bearer_auth(&secret)
        .header("X-Herma-Harness", "claude-code")
        .json(&json!({"id": "m", "kind": "noun", "schema_or_body": marker}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let request_id = created.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let dry = client
        .post(format!("{}/v1/dry-run", server.base))
        .header("x-api-key", &secret)
        .json(&json!({"protocol": "messages", "body": {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": marker}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(dry.status(), 200);
    let keys = client
        .get(format!("{}/v1/admin/keys", server.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(keys.status(), 200);
    let refused = client
        .get(format!("{}/v1/provisions", server.base))
        .bearer_auth("hmk_0123456789abcdef_wrongsecret")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    let (status, logs) = server.terminate();
    assert!(status.success());
    let secret_part = secret.rsplit('_').next().unwrap();
    for line in &logs {
        let entry: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("HERMA_LOG_FORMAT=json logs JSON lines ({e}): {line}"));
        assert!(
            entry["level"].is_string() && entry["timestamp"].is_string(),
            "{line}"
        );
        for forbidden in [secret_part, token, marker, "wrongsecret"] {
            assert!(
                !line.contains(forbidden),
                "a log line leaks `{forbidden}`: {line}"
            );
        }
    }
    let request_lines: Vec<_> = logs
        .iter()
        .filter(|l| l.contains(&format!("\"id\":\"{request_id}\"")))
        .collect();
    assert!(
        !request_lines.is_empty(),
        "the request id {request_id} appears in the logs: {logs:#?}"
    );
    assert!(
        request_lines.iter().any(|l| l.contains("/v1/context")),
        "the request's span names its route"
    );
}

/// `HERMA_EMBED_PRECISION` chooses the local model's arithmetic, and the identity says which:
/// vectors stored by one precision are never used by the other.
#[test]
fn the_embedding_precision_is_chosen_by_its_setting_and_named_in_the_identity() {
    let dir = tempfile::tempdir().unwrap();
    let model = herma_test_support::embed_model_dir();
    let check = |precision: &str| {
        let env = [
            ("HERMA_EMBED_MODEL_DIR", model.as_str()),
            ("HERMA_EMBED_PRECISION", precision),
        ];
        let out = run(dir.path(), &["models", "check"], &env);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        stdout(&out)
    };
    let f32 = check("f32");
    assert!(f32.contains("precision    f32"), "{f32}");
    assert!(
        f32.contains(":w32\n"),
        "f32 keeps the identity it always had: {f32}"
    );
    let int8 = check("int8");
    assert!(int8.contains("precision    int8"), "{int8}");
    assert!(int8.contains(":w32:q8\n"), "{int8}");
    let refused = run(
        dir.path(),
        &["models", "check"],
        &[("HERMA_EMBED_PRECISION", "int4")],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("HERMA_EMBED_PRECISION"),
        "{}",
        stderr(&refused)
    );
}

/// The semantic tier as a new user meets it: check the model, add a rule with three examples and
/// one negative, see a paraphrase fire it in a dry run with its score, then calibrate it.
#[tokio::test]
async fn a_semantic_rule_fires_on_a_paraphrase_in_a_dry_run_and_rules_eval_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = herma_test_support::embed_model_dir();
    let env = [("HERMA_EMBED_MODEL_DIR", model.as_str())];

    let missing = run(dir.path(), &["models", "check"], &[]);
    assert_eq!(missing.status.code(), Some(1), "{}", stdout(&missing));
    assert!(stdout(&missing).contains("embedding model: not configured"));
    let checked = run(dir.path(), &["models", "check"], &env);
    assert!(
        checked.status.success(),
        "{}{}",
        stdout(&checked),
        stderr(&checked)
    );
    let report = stdout(&checked);
    assert!(report.contains("embedding model: ok"), "{report}");
    assert!(report.contains("dimensions   384"), "{report}");
    assert!(report.contains("classifier: not configured"), "{report}");

    let key = issue_key(dir.path(), &env);
    let secret = key["key"].as_str().unwrap();
    let key_id = key["key_id"].as_str().unwrap();
    let server = Server::start(dir.path(), &env);
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        client
            .post(format!("{}{path}", server.base))
            .bearer_auth(secret)
            .header("X-Herma-Harness", "claude-code")
            .json(&body)
            .send()
    };
    let created = post("/v1/provisions", json!({
        "id": "deploy", "action": "respond_directly", "response": {"text": "Deploys go through the release train."},
        "triggers": {"semantic": {
            "examples": ["deploy to production", "push the new build live", "release the service to prod"],
            "negatives": ["roll back the last production deployment"]
        }}
    }))
    .await
    .unwrap();
    assert_eq!(created.status(), 201);
    let dry: Value = post("/v1/dry-run", json!({"protocol": "messages", "body": {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "publish this version for our customers"}]}}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(dry["decision"], "respond_directly", "{dry:#}");
    assert_eq!(dry["tiers"]["semantic"][0]["provision_id"], "deploy");
    assert!(dry["tiers"]["semantic"][0]["score"].as_f64().unwrap() >= 0.30);
    let (status, _) = server.terminate();
    assert!(status.success());

    let labels = dir.path().join("labels.jsonl");
    std::fs::write(
        &labels,
        [
            r#"{"text": "publish this version for our customers", "expect": ["deploy"]}"#,
            r#"{"text": "deploy the api to production", "expect": ["deploy"]}"#,
            r#"{"text": "revert the most recent production deploy", "expect": []}"#,
            r#"{"text": "what's the weather like in Lisbon tomorrow"}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let scope = format!("key:{key_id}");
    let eval = run(
        dir.path(),
        &[
            "rules",
            "eval",
            "labels.jsonl",
            "--caller",
            &scope,
            "--json",
        ],
        &env,
    );
    assert!(eval.status.success(), "{}", stderr(&eval));
    let report: Value = serde_json::from_str(&stdout(&eval)).unwrap();
    assert_eq!(report["examples"], 4);
    assert_eq!(report["exact"], 4, "{report:#}");
    let rule = &report["rules"][0];
    assert_eq!(rule["provision_id"], "deploy");
    assert_eq!(
        (
            rule["true_positives"].clone(),
            rule["false_positives"].clone()
        ),
        (json!(2), json!(0))
    );
    assert_eq!(rule["precision"], 1.0);
    assert_eq!(rule["recall"], 1.0);
    let (lowest, highest) = (
        rule["lowest_expected_score"].as_f64().unwrap(),
        rule["highest_other_score"].as_f64().unwrap(),
    );
    assert!((rule["margin"].as_f64().unwrap() - (lowest - highest)).abs() < 1e-6);

    let table = run(
        dir.path(),
        &["rules", "eval", "labels.jsonl", "--caller", &scope],
        &env,
    );
    assert!(table.status.success());
    assert!(
        stdout(&table).contains("4 examples, 4 exactly as labelled"),
        "{}",
        stdout(&table)
    );

    // A label naming no rule is refused with where it is.
    std::fs::write(&labels, r#"{"text": "x", "expect": ["dpeloy"]}"#).unwrap();
    let typo = run(
        dir.path(),
        &["rules", "eval", "labels.jsonl", "--caller", &scope],
        &env,
    );
    assert_eq!(typo.status.code(), Some(2));
    assert!(stderr(&typo).contains("/0/expect/0"), "{}", stderr(&typo));
}

/// The governed fabric as a new user meets it: point Herma at a Tessera, sync, and watch a
/// verified starter fire while a quarantined one never does.
// Two workers: the mock Tessera keeps serving while this test waits on the `herma` process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tessera_sync_brings_verified_starters_and_never_serves_quarantined_ones() {
    use herma_test_support::mock_tessera::{MockTessera, TOKEN};
    let tessera = MockTessera::start().await;
    let record = |id: &str, word: &str, status: &str| {
        json!({"uri": format!("tessera://records/starters/{id}"), "kind": "starter", "version": 1,
            "governance": {"status": status, "producer": "tessera", "visibility_scope": "public"},
            "provision": {"id": id, "action": "respond_directly", "response": {"text": format!("{id} answered")}, "triggers": {"keywords": [word]}}})
    };
    tessera.publish(vec![
        record("fabric.deploy", "deploy", "verified"),
        record("fabric.legacy", "legacy", "quarantined"),
        json!({"uri": "tessera://records/starters/bad", "kind": "starter", "version": 1}),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let url = tessera.url();
    let env = [
        ("HERMA_TESSERA_URL", url.as_str()),
        ("HERMA_TESSERA_TOKEN", TOKEN),
    ];

    let synced = run(dir.path(), &["tessera", "sync"], &env);
    assert!(
        synced.status.success(),
        "{}{}",
        stdout(&synced),
        stderr(&synced)
    );
    let out = stdout(&synced);
    assert!(out.contains("3 records in 1 pages: 2 created"), "{out}");
    assert!(out.contains("1 stored but not served"), "{out}");
    assert!(
        out.contains("refused tessera://records/starters/bad"),
        "{out}"
    );
    let again = run(dir.path(), &["tessera", "sync", "--json"], &env);
    let report: Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert_eq!(
        (report["created"].clone(), report["unchanged"].clone()),
        (json!(0), json!(2))
    );

    let key = issue_key(dir.path(), &[]);
    let secret = key["key"].as_str().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = reqwest::Client::new();
    for (word, expected) in [
        ("deploy now", Some("fabric.deploy")),
        ("legacy please", None),
    ] {
        let dry: Value = client
            .post(format!("{}/v1/dry-run", server.base))
            .bearer_auth(secret)
            .json(&json!({"protocol": "chat_completions", "body": {"model": "m", "messages": [{"role": "user", "content": word}]}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        match expected {
            Some(id) => assert_eq!(dry["provision_id"], id, "{dry:#}"),
            None => {
                assert_eq!(dry["decision"], "forward", "{dry:#}");
                assert_eq!(dry["governance_refused"][0]["code"], "quarantined");
            }
        }
    }
    let (status, _) = server.terminate();
    assert!(status.success());

    // Without a source: a usage error naming the settings.
    let none = run(dir.path(), &["tessera", "sync"], &[]);
    assert_eq!(none.status.code(), Some(2));
    assert!(stderr(&none).contains("HERMA_TESSERA_URL"));
}

#[test]
fn config_check_warns_about_redirected_providers_and_reports_each_turn_provider() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["config", "check"],
        &[
            ("HERMA_CONVERSATION_ENABLED", "true"),
            ("HERMA_CONVERSATION_META_BASE_URL", "http://127.0.0.1:9700"),
            ("HERMA_CONVERSATION_META_MAX_OUTPUT", "1024"),
            ("HERMA_META_BUDGET_USD", "2.01"),
            ("HERMA_CONVERSATION_OPENAI_MAX_OUTPUT", "lots"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("WARNING: HERMA_CONVERSATION_META_BASE_URL sends meta turns and the operator's meta key to http://127.0.0.1:9700"),
        "{text}"
    );
    assert!(
        text.contains(
            "conversation provider meta: usable with muse-spark-1.3 (allowance 1024, no key"
        ),
        "{text}"
    );
    assert!(
        text.contains("conversation provider openai: invalid_provider_configuration"),
        "{text}"
    );
    assert!(
        text.contains("conversation provider anthropic: output_allowance_required"),
        "{text}"
    );
}

#[test]
fn prune_says_what_it_deleted_and_what_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["prune"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "pruned 0 receipts (older than 30 days) and 0 rule outcomes (older than 90 days)"
    );
    let forever = run(
        dir.path(),
        &["prune"],
        &[("HERMA_RECEIPT_RETENTION_DAYS", "0")],
    );
    assert!(
        stdout(&forever).contains("0 receipts (kept forever)"),
        "{}",
        stdout(&forever)
    );
}

#[test]
fn conversations_budget_prints_every_provider_as_a_table_or_json() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("HERMA_CONVERSATION_META_MAX_OUTPUT", "1024"),
        ("HERMA_META_BUDGET_USD", "2.5"),
        ("HERMA_CONVERSATION_META_ACCOUNT_SCOPE", "team-a"),
        ("HERMA_CONVERSATION_DISABLED_PROVIDERS", "[\"anthropic\"]"),
    ];
    let table = run(dir.path(), &["conversations", "budget"], &env);
    assert!(table.status.success(), "{}", stderr(&table));
    let text = String::from_utf8_lossy(&table.stdout).to_string();
    let meta = text
        .lines()
        .find(|line| line.starts_with("meta "))
        .unwrap_or_else(|| panic!("{text}"));
    for cell in ["muse-spark-1.3", "team-a", "configured", "$0", "$2.5"] {
        assert!(meta.contains(cell), "{cell}: {meta}");
    }
    assert!(text.contains("0 calls today"), "{text}");
    assert!(text.contains("Provider health:\n  none"), "{text}");
    assert!(
        text.contains("Paused by the operator (HERMA_CONVERSATION_DISABLED_PROVIDERS): anthropic"),
        "{text}"
    );
    let json = run(dir.path(), &["conversations", "budget", "--json"], &env);
    assert!(json.status.success(), "{}", stderr(&json));
    let value = herma_core::json::parse_strict(&json.stdout).unwrap();
    assert_eq!(value["providers"].as_array().unwrap().len(), 5);
    assert_eq!(value["providers"][0]["budget_usd"], "2.5");
    assert_eq!(value["operator_disabled"][0], "anthropic");
}

#[test]
fn conversations_show_names_a_bad_scope_and_a_missing_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let bad = run(dir.path(), &["conversations", "show", "alice", "c1"], &[]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("`alice` is not a caller scope"),
        "{}",
        stderr(&bad)
    );
    let missing = run(
        dir.path(),
        &["conversations", "show", "key:0123456789abcdef", "c1"],
        &[],
    );
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("conversation"),
        "{}",
        stderr(&missing)
    );
}
