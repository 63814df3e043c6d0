//! Local stand-ins for the parties Herma talks to on the internet: the model providers
//! ([`mock_upstream`]; the five typed-conversation providers in [`mock_providers`]), a small-model endpoint for the classifier and remote embeddings
//! ([`mock_models`]) and Tessera ([`mock_tessera`]). Each speaks its party's real wire format,
//! errors and rate limits included, on `127.0.0.1:0`. They depend on nothing of Herma's, so the
//! load harness can use them without the test support that starts Herma itself.

// Stand-ins for tests and benchmarks: failing loudly is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod mock_models;
pub mod mock_providers;
pub mod mock_tessera;
pub mod mock_upstream;
