//! The governed single-call engine: one operation key is one model call — reserved, journaled,
//! dispatched at most once, settled exactly once, and recoverable without a second dispatch.
//!
//! Three runners share one engine (`engine`, a file per concern: run, settle, view,
//! recover): [`SingleCallRunner`] (text or native JSON, tool-free), [`GovernedStepRunner`] (a
//! trusted planned call under an operation root, buffered into a neutral [`Step`]) and
//! [`StructuredCallRunner`] (a forced tool as an extraction schema, on the step runner under a
//! root it owns). Their ports are the traits of
//! [`herma_store::governed`], re-exported as [`ports`]; the provider clients are
//! [`herma_providers::single`], speaking the protocols of [`herma_core::wire`] in the neutral
//! vocabulary of [`herma_core::call`]. See the crate's README for the guarantees.

mod collector;
mod engine;
mod step;
mod structured;
mod text;
mod types;

pub use collector::{
    Collected, Collector, CollectorLimits, InvalidReason, MAX_OUTPUT_CHARS_CEILING, Next,
    OrderEntry, Step, StepToolCall,
};
pub use engine::Validator;
pub use step::{
    GovernedStepRunner, LoadedRequest, MAX_RUN_TIMEOUT, OperationCallInput, RequestLoader,
    StepConfig, StepRun,
};
pub use structured::{
    ExpiredReport, ID_PREFIX, StructuredCallRunner, StructuredConfig, StructuredRun, structured_id,
};
pub use text::{
    InputLoader, LoadError, OutputContract, SingleCallConfig, SingleCallRunner, TextRun,
};
pub use types::{
    BackgroundError, BackgroundErrorHandler, CallMeta, CallPolicy, CallView, Cap, CapMode,
    CapWarning, Caps, DEFAULT_PAGE, Envelope, GovernedError, Identity, Interruption, JournalEntry,
    MAX_PAGE, Outcome, Output, PolicyChoice, PolicyHandle, Prices, ResultMeta, RunOutcome,
    UsageQuery, UsageReconciliation, ViewState, is_step_interruption, log_background_errors,
};

/// The ports the runners are given.
pub mod ports {
    pub use herma_store::governed::*;
}

pub use tokio_util::sync::CancellationToken;
