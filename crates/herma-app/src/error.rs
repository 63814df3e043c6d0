//! Turning store failures into problems. Backend failures are logged here and reach the client
//! only as a generic `internal` or `unavailable` problem: no SQL, no paths, no caller data.

use herma_core::{Problem, ProblemCode};
use herma_store::StoreError;

/// Maps a store error for an operation on `what` `id` whose caller expected `expected` version.
pub fn store_problem(err: StoreError, what: &str, id: &str, expected: u64) -> Problem {
    match err {
        StoreError::VersionConflict { current } => {
            let mut p = Problem::version_conflict(expected, current);
            if expected == 0 {
                p.detail = format!(
                    "{what} `{id}` already exists (version {})",
                    current.unwrap_or(0)
                );
            }
            p.with_pointer("/expected_version")
        }
        StoreError::NotFound => Problem::not_found(what, id),
        other => internal(other),
    }
}

/// A failure of Herma's own storage.
pub fn internal(err: StoreError) -> Problem {
    match err {
        StoreError::Backend(detail) => {
            tracing::error!(error = %detail, "storage failed");
            Problem::new(
                ProblemCode::Unavailable,
                "the database did not answer; try again",
            )
        }
        other => {
            tracing::error!(error = %other, "storage returned unexpected data");
            Problem::new(
                ProblemCode::Internal,
                "Herma could not complete the request",
            )
        }
    }
}
