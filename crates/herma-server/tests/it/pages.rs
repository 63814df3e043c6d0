//! H14 (pages): the landing page, the playground and the docs are served with a strict CSP and
//! no external assets, work without JavaScript (the playground's form posts to `/preview`), and
//! render cleanly in a real browser (headless Chromium, `tests/browser/pages.py`).

use std::path::PathBuf;

use herma_test_support::{Backend, TestApp, spawn_app};
use reqwest::StatusCode;
use serde_json::Value;

use crate::sdk::run_script;

async fn get(app: &TestApp, path: &str) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let response = app.client.get(app.url(path)).send().await.unwrap();
    (
        response.status(),
        response.headers().clone(),
        response.text().await.unwrap(),
    )
}

async fn post_form(app: &TestApp, form: &[(&str, &str)]) -> (StatusCode, String) {
    let response = app
        .client
        .post(app.url("/preview"))
        .form(form)
        .send()
        .await
        .unwrap();
    (response.status(), response.text().await.unwrap())
}

/// Every `src="…"` and `href="…"` of a page.
fn references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for attr in ["src=\"", "href=\""] {
        let mut rest = html;
        while let Some(at) = rest.find(attr) {
            rest = &rest[at + attr.len()..];
            let end = rest.find('"').unwrap();
            found.push(rest[..end].to_owned());
        }
    }
    found
}

#[tokio::test]
async fn h14_pages_have_a_strict_csp_and_load_nothing_from_elsewhere() {
    let app = spawn_app(Backend::Memory, &[]).await;
    for (path, scripts) in [("/", false), ("/docs", false), ("/preview", true)] {
        let (status, headers, html) = get(&app, path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(headers["content-type"], "text/html; charset=utf-8");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.starts_with("default-src 'none';"), "{path}: {csp}");
        assert!(csp.contains("frame-ancestors 'none'") && csp.contains("base-uri 'none'"));
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval") && !csp.contains('*')
        );
        assert_eq!(csp.contains("script-src 'self'"), scripts, "{path}: {csp}");
        assert_eq!(html.contains("<script"), scripts, "{path}");
        assert!(
            !html.contains("style=\"") && !html.contains("<style"),
            "{path}: no inline styles"
        );
        for handler in [
            " onclick=",
            " onload=",
            " onsubmit=",
            " onerror=",
            "javascript:",
        ] {
            assert!(!html.contains(handler), "{path}: no inline handlers");
        }

        assert!(
            html.contains("<svg") && html.contains(r#"aria-label="Herma""#),
            "{path}: the SVG brand"
        );
        for reference in references(&html) {
            assert!(
                reference.starts_with('/') || reference.starts_with('#'),
                "{path}: `{reference}` is not served by Herma"
            );
        }
        let (asset_status, _, _) = get(&app, "/assets/herma.css").await;
        assert_eq!(asset_status, StatusCode::OK);
    }
    let (_, headers, css) = get(&app, "/assets/herma.css").await;
    assert_eq!(headers["content-type"], "text/css; charset=utf-8");
    assert!(
        !css.contains("url(") && !css.contains("@import"),
        "the stylesheet loads nothing"
    );
    let (_, headers, js) = get(&app, "/assets/playground.js").await;
    assert_eq!(headers["content-type"], "text/javascript; charset=utf-8");
    assert!(js.contains("/api/preview") && !js.contains(".innerHTML"));
}

#[tokio::test]
async fn h14_the_playground_works_without_javascript() {
    let app = spawn_app(Backend::Memory, &[("HERMA_PREVIEW_RATE_PER_MINUTE", "6")]).await;
    let (status, html) = post_form(
        &app,
        &[
            ("protocol", "responses"),
            ("prompt", "how do I force push safely?"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains(r#"<span class="decision shim_context" id="decision">shim_context</span>"#)
    );
    assert!(html.contains("git.force-push") && html.contains("--force-with-lease"));
    assert!(
        html.contains(r#"<option value="responses" selected>"#),
        "the form keeps its choice"
    );

    let (_, html) = post_form(
        &app,
        &[("protocol", "chat_completions"), ("prompt", "/herma help")],
    )
    .await;
    assert!(html.contains(r#"id="decision">respond_directly<"#));
    assert!(html.contains("<h3>Direct answer</h3>"));

    // What the caller typed is shown as text, never as markup.
    let (_, html) = post_form(&app, &[("prompt", "<script>alert(1)</script> force push")]).await;
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; force push"));
    assert!(!html.contains("<script>alert"));

    // Bad forms name the field and run nothing.
    for (form, field) in [
        (vec![("protocol", "messages")], "prompt:"),
        (vec![("protocol", "smtp"), ("prompt", "hi")], "protocol:"),
        (vec![("prompt", "   ")], "prompt:"),
    ] {
        let (status, html) = post_form(&app, &form).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{form:?}");
        assert!(
            html.contains(&format!(r#"<p class="error" role="alert">{field}"#)),
            "{html}"
        );
    }
    let long = "x".repeat(8001);
    assert_eq!(
        post_form(&app, &[("prompt", &long)]).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // The form shares the preview's limit per address (3 runs above, 6 allowed).
    for _ in 0..3 {
        assert_eq!(post_form(&app, &[("prompt", "hi")]).await.0, StatusCode::OK);
    }
    let (status, html) = post_form(&app, &[("prompt", "hi")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(html.contains(r#"class="error""#));

    // ?prompt= fills the form in without running anything.
    let (status, _, html) = get(&app, "/preview?prompt=%2Fherma+help&protocol=responses").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(">/herma help</textarea>"));
    assert!(html.contains(r#"<option value="responses" selected>"#));
    assert!(!html.contains(r#"id="decision""#));
}

/// What the docs say about operations is what the code reads: the log filter is `HERMA_LOG`.
#[tokio::test]
async fn the_docs_name_the_settings_logs_are_configured_by() {
    let app = spawn_app(Backend::Memory, &[]).await;
    let (status, _, html) = get(&app, "/docs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("filtered by <code>HERMA_LOG</code> (default <code>info</code>)"),
        "{html}"
    );
    assert!(html.contains("<code>HERMA_LOG_FORMAT</code>"), "{html}");
    assert!(!html.contains("RUST_LOG"), "Herma does not read RUST_LOG");
}

fn browser_paths() -> (String, String) {
    #[allow(clippy::disallowed_methods)] // the test command says where the browser is
    let env =
        |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    let chromium = env("HERMA_TEST_CHROMIUM", "/usr/bin/chromium");
    let driver = env("HERMA_TEST_CHROMEDRIVER", "/usr/bin/chromedriver");
    for path in [&chromium, &driver] {
        assert!(
            PathBuf::from(path).exists(),
            "{path} is missing: scripts/test installs Debian's chromium and chromium-driver"
        );
    }
    (chromium, driver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h14_pages_render_in_headless_chromium() {
    let (chromium, driver) = browser_paths();
    let app = spawn_app(Backend::Sqlite, &[]).await;
    #[allow(clippy::disallowed_methods)] // CI may collect the screenshots elsewhere
    let artifacts = std::env::var("HERMA_TEST_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts")
        })
        .join("pages");
    let report = run_script(
        "../browser/pages.py",
        vec![
            ("HERMA_BASE", app.url("")),
            ("HERMA_ARTIFACTS", artifacts.display().to_string()),
            ("HERMA_TEST_CHROMIUM", chromium),
            ("HERMA_TEST_CHROMEDRIVER", driver),
            // Selenium must use the given driver, never fetch one.
            ("SE_OFFLINE", "true".to_owned()),
        ],
    )
    .await;
    assert!(
        report["checks"].as_u64().unwrap() >= 45,
        "every check ran: {report}"
    );
    let shots = report["screenshots"].as_array().unwrap();
    assert!(shots.len() >= 8);
    for shot in shots.iter().filter_map(Value::as_str) {
        let bytes = std::fs::read(shot).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "{shot} is a real screenshot"
        );
    }
}
