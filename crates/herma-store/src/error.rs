use thiserror::Error;

pub type StoreResult<T> = Result<T, StoreError>;

/// What a store can report. Only `VersionConflict` and `NotFound` are about the caller's input;
/// `Backend` means the storage itself failed and carries no caller data.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The record's version is not the one expected. `current` is its version now (`None` when
    /// it does not exist). Nothing was written.
    #[error("version conflict (current version {current:?})")]
    VersionConflict { current: Option<u64> },
    #[error("not found")]
    NotFound,
    /// A stored row could not be read back as a record (a corrupted or foreign row).
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    #[error("storage failed: {0}")]
    Backend(String),
}
