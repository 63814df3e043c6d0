//! H18: nothing Herma serves, ships or runs names a retired pack
//! (`herma_core::retired::RETIRED_PACK_NAMES`, the one list).

use std::path::{Path, PathBuf};

use herma_core::retired;
use herma_test_support::{Backend, spawn_app};
use reqwest::Method;
use serde_json::{Value, json};

use crate::req;

fn assert_clean(what: &str, text: &str) {
    let found = retired::mentions(text);
    assert!(
        found.is_empty(),
        "{what} names retired packs: {:?}",
        found
            .iter()
            .map(|m| (
                m.name,
                &text[m.offset.saturating_sub(30)..(m.offset + 30).min(text.len())]
            ))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn h18_served_text_names_no_retired_pack() {
    let app = spawn_app(Backend::Sqlite, &[]).await;
    let key = app.key("route,configure", Some("claude-code")).await;
    let openapi: Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // Every public GET route without parameters, as the API description lists them.
    let mut paths: Vec<String> = openapi["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(path, item)| {
            !path.contains('{')
                && item["get"]["tags"].as_array().is_some_and(|t| {
                    t.iter().any(|t| {
                        ["public", "pages", "system"].contains(&t.as_str().unwrap_or_default())
                    })
                })
        })
        .map(|(path, _)| path.clone())
        .collect();
    paths.sort();
    for expected in [
        "/",
        "/docs",
        "/preview",
        "/llms.txt",
        "/llms-full.txt",
        "/connect.json",
        "/.well-known/agent-card.json",
        "/robots.txt",
        "/favicon.svg",
        "/openapi.json",
        "/assets/herma.css",
        "/assets/playground.js",
        "/metrics",
        "/healthz",
    ] {
        assert!(
            paths.iter().any(|p| p == expected),
            "{expected} is scanned: {paths:?}"
        );
    }
    let mut corpus = String::new();
    for path in &paths {
        let response = app
            .client
            .get(app.url(path))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        let text = response.text().await.unwrap();
        assert_clean(path, &text);
        corpus.push_str(&text);
    }
    // What the starters say when they fire, and what the MCP server describes.
    for prompt in ["/herma help", "force push", "rotate the api key in .env"] {
        let response = app
            .client
            .post(app.url("/preview"))
            .form(&[("prompt", prompt)])
            .send()
            .await
            .unwrap();
        let text = response.text().await.unwrap();
        assert_clean(&format!("the playground's answer to {prompt}"), &text);
        corpus.push_str(&text);
    }
    for (method, params) in [
        ("tools/list", json!({})),
        ("resources/list", json!({})),
        (
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        ),
    ] {
        let reply = req(Method::POST, "/mcp")
            .key(&key)
            .json(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send(&app)
            .await;
        let text = reply.2.to_string();
        assert_clean(method, &text);
        corpus.push_str(&text);
    }
    for path in [
        "/v1/provisions?scope=system_builtin",
        "/v1/context?scope=system_builtin",
    ] {
        let listed = req(Method::GET, path).key(&key).send(&app).await;
        let text = listed.2.to_string();
        assert_clean(path, &text);
        corpus.push_str(&text);
    }
    // The scan read real text: it finds a name that is there.
    assert!(corpus.len() > 100_000, "scanned {} bytes", corpus.len());
    assert!(retired::find(&corpus, &["force-with-lease", "Herma"]).len() > 20);
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | ".venv" | "node_modules") {
                collect(&path, out);
            }
        } else if [
            "rs", "json", "sql", "md", "css", "js", "svg", "py", "toml", "txt", "sh", "html",
        ]
        .iter()
        .any(|ext| name.ends_with(&format!(".{ext}")))
            || matches!(name.as_str(), "test" | "run")
        {
            out.push(path);
        }
    }
}

#[test]
fn h18_seed_data_and_runtime_sources_name_no_retired_pack() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for dir in ["crates", "docs", "scripts", ".ci"] {
        collect(&root.join(dir), &mut files);
    }
    for file in ["README.md", "ARCHITECTURE.md", "Cargo.toml"] {
        files.push(root.join(file));
    }
    let the_list = root.join("crates/herma-core/src/retired.rs");
    let mut scanned = 0;
    let mut hits_of_a_present_name = 0;
    for file in &files {
        if file.ends_with("herma-core/src/retired.rs") {
            continue;
        }
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_clean(&file.display().to_string(), &text);
        hits_of_a_present_name += retired::find(&text, &["caller_scope"]).len();
        scanned += 1;
    }
    assert!(the_list.exists(), "the one list lives in herma-core");
    // The starter data, the migrations, the pages and the sources were all among them.
    for needle in [
        "starters/provisions.json",
        "starters/context.json",
        "migrations/0001_initial.sql",
        "assets/playground.js",
        "herma-app/src/proxy/mod.rs",
        "docs/proxy.md",
    ] {
        assert!(
            files.iter().any(|f| f.to_string_lossy().ends_with(needle)),
            "{needle} was scanned"
        );
    }
    assert!(scanned > 100, "scanned {scanned} files");
    // The scan reads the files: a name that is there is found.
    assert!(hits_of_a_present_name > 50);
}
