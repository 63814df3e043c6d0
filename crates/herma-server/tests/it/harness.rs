//! The real coding harnesses as clients of Herma: Claude Code, Codex CLI and opencode — the npm
//! packages pinned in `scripts/harness/package-lock.json` — each run non-interactively through
//! Herma against the mock upstream, exactly as `docs/proxy.md` sets them up (the Herma key as
//! their API key, the upstream named in `X-Upstream-Base-Url` and `X-Upstream-Api-Key`).
//!
//! Each run is isolated and offline: a cleared environment, its own HOME and XDG directories,
//! telemetry, updates, plugin and model-catalogue fetches switched off, and every proxy variable
//! pointing at a local trap that records any attempt to reach the internet (the tests assert it
//! saw none). `scripts/test` installs the CLIs and names them in `HERMA_TEST_CLAUDE`,
//! `HERMA_TEST_CODEX` and `HERMA_TEST_OPENCODE`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herma_test_support::mock_upstream::{MockUpstream, Recorded, TEXT};
use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::req;

/// The context a matching `shim_context` provision adds, as Herma renders it.
const SHIM: &str = "[VERB CONTEXT]\n## deploy.checklist (deploy.checklist, v1)\nRun the migrations before the canary.";
/// The `respond_directly` provision's answer.
const DIRECT: &str = "Deploys are frozen until Monday.";
/// A prompt the shim provision matches (keyword `deploy`).
const SHIM_PROMPT: &str = "Please deploy the fix. Reply in one sentence.";
/// A prompt the direct-answer provision matches (keyword `freeze-check`).
const DIRECT_PROMPT: &str = "freeze-check: may I ship today?";
/// The vendor key the harness sends in `X-Upstream-Api-Key`, for the upstream only.
const VENDOR_KEY: &str = "sk-mock-vendor-key";
/// The longest one CLI run may take before it is killed (a hang, not a slow machine).
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// The CLI named by `var`, else the checkout's own install, else a clear failure.
fn cli(var: &str, bin: &str) -> PathBuf {
    #[allow(clippy::disallowed_methods)] // the test command names the executables
    if let Ok(path) = std::env::var(var) {
        return PathBuf::from(path);
    }
    let installed = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/harness/node_modules/.bin")
        .join(bin);
    assert!(
        installed.exists(),
        "{var} is not set and {} does not exist: run the tests with scripts/test, which installs \
         the pinned CLIs (npm ci --ignore-scripts in scripts/harness, then their postinstalls)",
        installed.display()
    );
    installed
}

/// A local listener standing in for the internet: every proxy variable of a run points here,
/// so any attempt to reach a host outside loopback is recorded (its first request line).
struct Trap {
    addr: std::net::SocketAddr,
    attempts: Arc<Mutex<Vec<String>>>,
}

impl Trap {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let seen = attempts.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut head = vec![0; 512];
                    let read = tokio::time::timeout(Duration::from_secs(2), socket.read(&mut head))
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .unwrap_or(0);
                    let line = String::from_utf8_lossy(&head[..read])
                        .lines()
                        .next()
                        .unwrap_or("(a connection without a request line)")
                        .to_owned();
                    seen.lock().unwrap().push(line);
                });
            }
        });
        Self { addr, attempts }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn attempts(&self) -> Vec<String> {
        self.attempts.lock().unwrap().clone()
    }
}

/// Herma with a caller whose rules shim on `deploy` (once per conversation when `once`) and
/// answer `freeze-check` directly, the mock upstream, and the trap.
struct Bench {
    app: TestApp,
    mock: MockUpstream,
    trap: Trap,
    key: String,
    home: tempfile::TempDir,
}

impl Bench {
    async fn start(harness: &str, once: bool) -> Self {
        let app = spawn_app(Backend::Sqlite, &[]).await;
        let mock = MockUpstream::start().await;
        let trap = Trap::start().await;
        let key = app.key("route,configure", Some(harness)).await;
        for (path, body) in [
            (
                "/v1/context",
                json!({"id": "deploy.checklist", "kind": "verb", "schema_or_body": "Run the migrations before the canary."}),
            ),
            (
                "/v1/provisions",
                json!({"id": "deploy", "action": "shim_context", "once_per_conversation": once, "triggers": {"keywords": ["deploy"]}, "context_refs": ["deploy.checklist"]}),
            ),
            (
                "/v1/provisions",
                json!({"id": "freeze", "action": "respond_directly", "triggers": {"keywords": ["freeze-check"]}, "response": {"text": DIRECT}}),
            ),
        ] {
            let got = req(Method::POST, path)
                .key(&key)
                .harness(harness)
                .json(body)
                .send(&app)
                .await;
            assert_eq!(got.0, StatusCode::CREATED, "{}", got.2);
        }
        Self {
            app,
            mock,
            trap,
            key,
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// A fresh directory under this bench's home.
    fn dir(&self, name: &str) -> PathBuf {
        let dir = self.home.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The environment every run starts from: nothing of the developer's (no vendor keys, no
    /// real HOME), loopback reached directly and everything else sent to the trap.
    fn base_env(&self, home: &Path) -> Vec<(String, String)> {
        let home = home.display().to_string();
        let mut env = vec![
            (
                "PATH".to_owned(),
                std::env::var_os("PATH")
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            ("HOME".to_owned(), home.clone()),
            ("XDG_CONFIG_HOME".to_owned(), format!("{home}/.config")),
            ("XDG_DATA_HOME".to_owned(), format!("{home}/.local/share")),
            ("XDG_STATE_HOME".to_owned(), format!("{home}/.local/state")),
            ("XDG_CACHE_HOME".to_owned(), format!("{home}/.cache")),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ("TERM".to_owned(), "dumb".to_owned()),
            ("NO_COLOR".to_owned(), "1".to_owned()),
        ];
        for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
            env.push((var.to_owned(), self.trap.url()));
            env.push((var.to_ascii_lowercase(), self.trap.url()));
        }
        for var in ["NO_PROXY", "no_proxy"] {
            env.push((var.to_owned(), "127.0.0.1,localhost".to_owned()));
        }
        env
    }

    /// The model calls the mock received (anything but model listings and token counts).
    fn model_calls(&self) -> Vec<Recorded> {
        self.mock
            .requests()
            .into_iter()
            .filter(|r| !r.path.ends_with("/models") && !r.path.ends_with("/count_tokens"))
            .collect()
    }

    /// What every test checks at the end: the Herma key never reached the upstream (headers,
    /// path, query or body), the vendor key did, and nothing tried to leave the machine.
    fn assert_key_hygiene_and_offline(&self, vendor_key_header: (&str, &str)) {
        let seen = self.mock.requests();
        assert!(!seen.is_empty());
        for r in &seen {
            let everything = format!(
                "{} {} {:?} {:?} {}",
                r.method,
                r.path,
                r.query,
                r.headers,
                String::from_utf8_lossy(&r.body)
            );
            assert!(
                !everything.contains("hmk_") && !everything.contains(&self.key),
                "the Herma key reached the upstream in {} {}",
                r.method,
                r.path
            );
            assert_eq!(
                r.header(vendor_key_header.0),
                Some(vendor_key_header.1),
                "the vendor key goes upstream in {}",
                vendor_key_header.0
            );
        }
        assert_eq!(
            self.trap.attempts(),
            Vec::<String>::new(),
            "the CLI tried to reach the internet"
        );
    }
}

/// What one CLI run printed.
struct Ran {
    stdout: String,
    stderr: String,
}

/// Runs `program` in `dir` with exactly `env`, stdin closed, in its own process group; kills the
/// whole group when it ends or after [`RUN_LIMIT`].
async fn run(program: &Path, args: &[&str], dir: &Path, env: Vec<(String, String)>) -> Ran {
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let out_path = dir.join(format!("{name}.stdout"));
    let err_path = dir.join(format!("{name}.stderr"));
    let mut child = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e} (scripts/test installs the CLIs)",
                program.display()
            )
        });
    let group = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .filter(|pid| !pid.is_init());
    let mut waiting = tokio::task::spawn_blocking(move || child.wait());
    let status = tokio::time::timeout(RUN_LIMIT, &mut waiting).await;
    // Whatever the CLI left behind (helpers, servers) goes with it; a hung CLI too.
    if let Some(group) = group {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
    let status = match status {
        Ok(joined) => joined.unwrap(),
        Err(_) => {
            let _ = waiting.await;
            let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            panic!(
                "{name} {args:?} did not finish within {RUN_LIMIT:?} and was killed:\n{stdout}\n{stderr}"
            );
        }
    };
    let ran = Ran {
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    };
    match status {
        Ok(status) => assert!(
            status.success(),
            "{name} {args:?} failed ({status}):\n{}\n{}",
            ran.stdout,
            ran.stderr
        ),
        Err(e) => panic!("waiting for {name}: {e}"),
    }
    ran
}

/// The model calls whose body carries `prompt`.
fn carrying<'a>(calls: &'a [Recorded], prompt: &str) -> Vec<&'a Recorded> {
    calls
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains(prompt))
        .collect()
}

/// How often the shim's text occurs in a request body.
fn shim_count(r: &Recorded) -> usize {
    let shim = serde_json::to_string(SHIM).unwrap();
    let shim = shim.trim_matches('"');
    String::from_utf8_lossy(&r.body).matches(shim).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_gets_its_answer_the_shim_as_a_system_block_and_a_direct_answer_with_no_upstream_call()
 {
    let claude = cli("HERMA_TEST_CLAUDE", "claude");
    let bench = Bench::start("claude-code", false).await;
    let run_claude = |prompt: &'static str, name: &str| {
        let home = bench.dir(&format!("{name}-home"));
        let work = bench.dir(&format!("{name}-work"));
        let mut env = bench.base_env(&home);
        env.extend(
            [
                ("ANTHROPIC_BASE_URL", bench.app.url("")),
                ("ANTHROPIC_API_KEY", bench.key.clone()),
                (
                    "ANTHROPIC_CUSTOM_HEADERS",
                    format!(
                        "X-Upstream-Base-Url: {}\nX-Upstream-Api-Key: {VENDOR_KEY}",
                        bench.mock.url()
                    ),
                ),
                // Autoupdater, telemetry and error reports off (else it also reaches
                // api.anthropic.com beside the configured base URL).
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        let claude = claude.clone();
        async move { run(&claude, &["-p", prompt], &work, env).await }
    };

    let ran = run_claude(SHIM_PROMPT, "shim").await;
    assert!(ran.stdout.contains(TEXT), "{}\n{}", ran.stdout, ran.stderr);
    let calls = bench.model_calls();
    let answered = carrying(&calls, SHIM_PROMPT);
    assert!(!answered.is_empty(), "the prompt went upstream: {calls:?}");
    for r in answered {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(
            r.query.as_deref(),
            Some("beta=true"),
            "the query string is kept"
        );
        let body = r.json();
        let system = body["system"].as_array().unwrap();
        let (shim, original) = system.split_last().unwrap();
        assert_eq!(
            shim,
            &json!({"type": "text", "text": SHIM}),
            "appended to system"
        );
        assert!(
            original.iter().any(|b| b.get("cache_control").is_some()),
            "Claude Code's cache-marked system blocks stay in front: {original:?}"
        );
        assert_eq!(shim_count(r), 1, "the shim is in system only");
    }

    let before = bench.model_calls().len();
    let ran = run_claude(DIRECT_PROMPT, "direct").await;
    assert!(
        ran.stdout.contains(DIRECT),
        "{}\n{}",
        ran.stdout,
        ran.stderr
    );
    assert_eq!(
        bench.model_calls().len(),
        before,
        "a direct answer costs no upstream call"
    );

    bench.assert_key_hygiene_and_offline(("x-api-key", VENDOR_KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_gets_its_answer_the_shim_as_a_developer_item_and_a_direct_answer_with_no_upstream_call()
 {
    let codex = cli("HERMA_TEST_CODEX", "codex");
    let bench = Bench::start("codex", false).await;
    let run_codex = |prompt: &'static str, name: &str| {
        let home = bench.dir(&format!("{name}-home"));
        let work = bench.dir(&format!("{name}-work"));
        let codex_home = home.join(".codex");
        std::fs::create_dir_all(&codex_home).unwrap();
        // The provider of docs/proxy.md, plus what keeps Codex offline: no analytics (it
        // reaches ab.chatgpt.com) or feedback uploads, no update check, and no plugins (a git
        // clone of openai/plugins from GitHub, GitHub's API and the ChatGPT plugin catalogue).
        let config = format!(
            r#"model_provider = "herma"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false

[model_providers.herma]
name = "Herma"
base_url = "{herma}/v1"
env_key = "HERMA_KEY"
wire_api = "responses"
http_headers = {{ "X-Upstream-Base-Url" = "{mock}" }}
env_http_headers = {{ "X-Upstream-Api-Key" = "MOCK_VENDOR_KEY" }}
"#,
            herma = bench.app.url(""),
            mock = bench.mock.url()
        );
        std::fs::write(codex_home.join("config.toml"), config).unwrap();
        let mut env = bench.base_env(&home);
        env.extend(
            [
                ("CODEX_HOME", codex_home.display().to_string()),
                ("HERMA_KEY", bench.key.clone()),
                ("MOCK_VENDOR_KEY", VENDOR_KEY.to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        let codex = codex.clone();
        async move {
            run(
                &codex,
                &[
                    "exec",
                    "--strict-config",
                    "--skip-git-repo-check",
                    "--ephemeral",
                    "--color",
                    "never",
                    prompt,
                ],
                &work,
                env,
            )
            .await
        }
    };

    let ran = run_codex(SHIM_PROMPT, "shim").await;
    assert!(ran.stdout.contains(TEXT), "{}\n{}", ran.stdout, ran.stderr);
    let calls = bench.model_calls();
    let answered = carrying(&calls, SHIM_PROMPT);
    assert!(!answered.is_empty(), "the prompt went upstream: {calls:?}");
    for r in answered {
        assert_eq!(r.path, "/v1/responses");
        let body = r.json();
        let input = body["input"].as_array().unwrap();
        let latest_user = input
            .iter()
            .rposition(|item| item["role"] == "user")
            .unwrap();
        assert!(
            input[latest_user].to_string().contains(SHIM_PROMPT),
            "the prompt is the latest user item"
        );
        assert!(latest_user > 0);
        assert_eq!(
            input[latest_user - 1],
            json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": SHIM}]}),
            "a developer item just before the latest user item"
        );
        assert_eq!(
            shim_count(r),
            1,
            "instructions and the rest of input untouched"
        );
    }

    let before = bench.model_calls().len();
    let ran = run_codex(DIRECT_PROMPT, "direct").await;
    assert!(
        ran.stdout.contains(DIRECT),
        "{}\n{}",
        ran.stdout,
        ran.stderr
    );
    assert_eq!(
        bench.model_calls().len(),
        before,
        "a direct answer costs no upstream call"
    );

    bench.assert_key_hygiene_and_offline(("authorization", &format!("Bearer {VENDOR_KEY}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_run_gets_its_answer_a_once_only_shim_as_a_system_message_in_one_of_its_two_requests_and_a_direct_answer_with_no_upstream_call()
 {
    let opencode = cli("HERMA_TEST_OPENCODE", "opencode");
    let bench = Bench::start("opencode", true).await;
    let run_opencode = |prompt: &'static str, name: &str| {
        let home = bench.dir(&format!("{name}-home"));
        let work = bench.dir(&format!("{name}-work"));
        // The provider of docs/proxy.md, pointed at this Herma and the mock.
        let config = json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            "provider": {"herma": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Herma",
                "options": {
                    "baseURL": bench.app.url("/v1"),
                    "apiKey": "{env:HERMA_KEY}",
                    "headers": {"X-Upstream-Base-Url": bench.mock.url(), "X-Upstream-Api-Key": "{env:MOCK_VENDOR_KEY}"}
                },
                "models": {"mock-model": {}}
            }},
            "model": "herma/mock-model"
        });
        let config_path = home.join("opencode.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let mut env = bench.base_env(&home);
        env.extend(
            [
                ("OPENCODE_CONFIG", config_path.display().to_string()),
                ("HERMA_KEY", bench.key.clone()),
                ("MOCK_VENDOR_KEY", VENDOR_KEY.to_owned()),
                // No model catalogue (models.opencode.ai); and, though not seen reaching out
                // in `run`: no update check, sharing, LSP downloads, default plugins or reading
                // a Claude Code setup.
                ("OPENCODE_DISABLE_MODELS_FETCH", "1".to_owned()),
                ("OPENCODE_DISABLE_AUTOUPDATE", "1".to_owned()),
                ("OPENCODE_DISABLE_SHARE", "1".to_owned()),
                ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".to_owned()),
                ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1".to_owned()),
                ("OPENCODE_DISABLE_CLAUDE_CODE", "1".to_owned()),
                // opencode installs `@opencode-ai/plugin` into its config directory on start
                // (its bundled npm); offline, that install fails quietly instead of fetching.
                ("npm_config_offline", "true".to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        let opencode = opencode.clone();
        async move { run(&opencode, &["run", "--pure", prompt], &work, env).await }
    };

    let ran = run_opencode(SHIM_PROMPT, "shim").await;
    assert!(ran.stdout.contains(TEXT), "{}\n{}", ran.stdout, ran.stderr);
    let calls = bench.model_calls();
    let answered = carrying(&calls, SHIM_PROMPT);
    // A title request and the answer request, sent together, both carrying the prompt: the
    // once-per-conversation shim (one session, `x-session-id`) reaches exactly one of them.
    assert_eq!(
        answered.len(),
        2,
        "a title and an answer request: {calls:?}"
    );
    assert_eq!(
        answered.iter().map(|r| shim_count(r)).sum::<usize>(),
        1,
        "exactly one of the two carries the shim"
    );
    for r in answered {
        assert_eq!(r.path, "/v1/chat/completions");
        assert!(r.header("x-session-id").is_some());
        if shim_count(r) == 0 {
            continue;
        }
        let body = r.json();
        let messages = body["messages"].as_array().unwrap();
        let latest_user = messages.iter().rposition(|m| m["role"] == "user").unwrap();
        assert!(
            messages[latest_user].to_string().contains(SHIM_PROMPT),
            "the prompt is the latest user message"
        );
        assert!(latest_user > 0);
        assert_eq!(
            messages[latest_user - 1],
            json!({"role": "system", "content": SHIM}),
            "a system message just before the latest user message"
        );
    }

    let before = bench.model_calls().len();
    let ran = run_opencode(DIRECT_PROMPT, "direct").await;
    assert!(
        ran.stdout.contains(DIRECT),
        "{}\n{}",
        ran.stdout,
        ran.stderr
    );
    assert_eq!(
        bench.model_calls().len(),
        before,
        "a direct answer costs no upstream call"
    );

    bench.assert_key_hygiene_and_offline(("authorization", &format!("Bearer {VENDOR_KEY}")));
}

#[test]
fn docs_name_the_pinned_cli_versions_and_the_lock_pins_exactly_them() {
    let manifest: serde_json::Value =
        serde_json::from_str(include_str!("../../../../scripts/harness/package.json")).unwrap();
    let lock: serde_json::Value = serde_json::from_str(include_str!(
        "../../../../scripts/harness/package-lock.json"
    ))
    .unwrap();
    // Line breaks in the prose count as spaces.
    let docs = include_str!("../../../../docs/proxy.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let pinned = manifest["dependencies"].as_object().unwrap();
    assert_eq!(pinned.len(), 3);
    for (name, version) in pinned {
        let version = version.as_str().unwrap();
        assert!(
            version.chars().all(|c| c.is_ascii_digit() || c == '.'),
            "{name} is pinned to an exact version, not {version}"
        );
        assert_eq!(
            lock["packages"][format!("node_modules/{name}")]["version"],
            version,
            "the lock installs {name} {version}"
        );
        assert!(
            docs.contains(&format!("**{version}** (`{name}`)")),
            "docs/proxy.md names {name} {version}"
        );
    }
}
