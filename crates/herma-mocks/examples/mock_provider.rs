//! A local stand-in for one typed-conversation provider, for trying conversations without an
//! account (`docs/conversations.md`):
//!
//! ```sh
//! cargo run -p herma-mocks --example mock_provider -- meta --port 9700 \
//!   --text "Which document?" --call 'schedule_review={"document":"spec.md","days":3}'
//! ```
//!
//! It answers the scripted replies in order (`--text` a plain answer, `--call NAME=JSON` a
//! function call), then a short question; it accepts the key `sk-mock-provider-key`.

use herma_mocks::mock_providers::{Answer, KEY, Kind, MockProvider};

fn usage() -> ! {
    eprintln!(
        "usage: mock_provider meta|ollama|openai|anthropic|openrouter [--port N] [--text TEXT] [--call NAME=JSON]..."
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let kind = match args.next().as_deref() {
        Some("meta") => Kind::Meta,
        Some("ollama") => Kind::Ollama,
        Some("openai") => Kind::Openai,
        Some("anthropic") => Kind::Anthropic,
        Some("openrouter") => Kind::Openrouter,
        _ => usage(),
    };
    let mut port = 0u16;
    let mut answers = Vec::new();
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--port" => port = value.parse().unwrap_or_else(|_| usage()),
            "--text" => answers.push(Answer::Text(value)),
            "--call" => {
                let (name, arguments) = value.split_once('=').unwrap_or_else(|| usage());
                let arguments = serde_json::from_str(arguments).unwrap_or_else(|_| usage());
                answers.push(Answer::ToolCall {
                    name: name.to_owned(),
                    arguments,
                });
            }
            _ => usage(),
        }
    }
    let mock = MockProvider::start_on(kind, port).await;
    mock.answer(answers);
    println!(
        "mock {kind:?} provider at {} (key {KEY}); Ctrl-C stops it",
        mock.origin()
    );
    let _ = tokio::signal::ctrl_c().await;
}
