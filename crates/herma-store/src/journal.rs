//! The receipt journal: every receipt is appended to a local file before the response it
//! describes ends, so a crash (`kill -9`, an OOM kill) between the response and the batched
//! database write loses none. A file written with `write(2)` outlives the process that wrote
//! it (the kernel holds its pages), which is all a crash of the process needs.
//!
//! The journal is a directory of segment files, `receipts-<pid>-<start>-<n>-<seq>.jsonl`, one
//! sealed receipt per line. A process appends to its current segment and holds an exclusive
//! lock on every segment it owns. When the receipt writer has stored what a segment holds,
//! [`FileJournal::committed`] rotates to a new segment once the current one is large and
//! removes the old one. At the next start, [`FileJournal::orphans`] reads the segments no
//! live process holds — what a crashed process left — so they can be stored (the store's
//! insert ignores receipts it already has) and then [`Orphans::discard`]ed.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use herma_core::model::InjectionReceipt;

/// A segment this large is rotated once its receipts are stored.
const ROTATE_BYTES: u64 = 256 * 1024;
const PREFIX: &str = "receipts-";
const SUFFIX: &str = ".jsonl";

/// Which segment a receipt went to; handed back to [`FileJournal::committed`] once it is
/// stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalMark(u64);

pub struct FileJournal {
    dir: PathBuf,
    /// `receipts-<pid>-<start>-`: this process's segments.
    stem: String,
    state: Mutex<State>,
}

struct State {
    seq: u64,
    file: File,
    bytes: u64,
    segments: BTreeMap<u64, Counts>,
}

#[derive(Default)]
struct Counts {
    appended: u64,
    committed: u64,
}

impl FileJournal {
    /// Opens (creating) the journal directory and this process's first segment.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        // Only a name for this process's files, never a decision: the wall clock is fine.
        #[allow(clippy::disallowed_methods)]
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        // Unique per journal, even for two opened by one process in one millisecond.
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let n = OPENED.fetch_add(1, Ordering::Relaxed);
        let stem = format!("{PREFIX}{}-{start}-{n}-", std::process::id());
        let file = create_segment(&dir, &stem, 0)?;
        let mut segments = BTreeMap::new();
        segments.insert(0, Counts::default());
        Ok(Self {
            dir,
            stem,
            state: Mutex::new(State {
                seq: 0,
                file,
                bytes: 0,
                segments,
            }),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends `receipt` as one line. `None` when it could not be written (logged; the receipt
    /// still goes to the database, only its crash safety is lost).
    pub fn append(&self, receipt: &InjectionReceipt) -> Option<JournalMark> {
        let json = receipt.to_json();
        let mut line = Vec::with_capacity(json.len() + 1);
        line.extend_from_slice(json.as_bytes());
        line.push(b'\n');
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(err) = state.file.write_all(&line) {
            tracing::error!(error = %err, receipt = %receipt.id, dir = %self.dir.display(), "a receipt could not be journaled");
            return None;
        }
        state.bytes += line.len() as u64;
        let seq = state.seq;
        state.segments.entry(seq).or_default().appended += 1;
        Some(JournalMark(seq))
    }

    /// The receipts of `marks` are stored: segments whose every receipt is stored are removed,
    /// and a large current segment is replaced by a new one first.
    pub fn committed(&self, marks: &[JournalMark]) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for mark in marks {
            if let Some(counts) = state.segments.get_mut(&mark.0) {
                counts.committed += 1;
            }
        }
        if state.bytes >= ROTATE_BYTES {
            match create_segment(&self.dir, &self.stem, state.seq + 1) {
                Ok(file) => {
                    state.seq += 1;
                    state.file = file;
                    state.bytes = 0;
                    let seq = state.seq;
                    state.segments.insert(seq, Counts::default());
                }
                Err(err) => {
                    tracing::warn!(error = %err, dir = %self.dir.display(), "a new receipt journal segment could not be created");
                }
            }
        }
        let current = state.seq;
        let done: Vec<u64> = state
            .segments
            .iter()
            .filter(|(seq, c)| **seq != current && c.committed >= c.appended)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in done {
            state.segments.remove(&seq);
            let path = segment_path(&self.dir, &self.stem, seq);
            if let Err(err) = fs::remove_file(&path) {
                tracing::warn!(error = %err, path = %path.display(), "a stored receipt journal segment could not be removed");
            }
        }
    }

    /// At a clean stop, after the last receipt was stored: removes this process's segments
    /// when every receipt in them is stored (else they stay for the next start to recover).
    pub fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.segments.values().all(|c| c.committed >= c.appended) {
            for seq in std::mem::take(&mut state.segments).into_keys() {
                let _ = fs::remove_file(segment_path(&self.dir, &self.stem, seq));
            }
        }
    }

    /// The receipts in segments no live process holds: what a crashed process left unstored
    /// (and possibly some it had stored). A torn last line — the crash came mid-write — is
    /// skipped with a warning: its response had not ended.
    pub fn orphans(&self) -> io::Result<Orphans> {
        let mut orphans = Orphans::default();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !name.starts_with(PREFIX) || !name.ends_with(SUFFIX) || name.starts_with(&self.stem)
            {
                continue;
            }
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            match file.try_lock() {
                Ok(()) => {}
                // A live process's segment.
                Err(fs::TryLockError::WouldBlock) => continue,
                Err(fs::TryLockError::Error(err)) => return Err(err),
            }
            for (n, line) in BufReader::new(&file).lines().enumerate() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<InjectionReceipt>(&line) {
                    Ok(receipt) => orphans.receipts.push(receipt),
                    Err(err) => tracing::warn!(
                        error = %err, path = %path.display(), line = n + 1,
                        "skipping a torn receipt journal line"
                    ),
                }
            }
            orphans.files.push((path, file));
        }
        Ok(orphans)
    }
}

/// Segments a crashed process left, read and locked by [`FileJournal::orphans`].
#[derive(Default)]
pub struct Orphans {
    pub receipts: Vec<InjectionReceipt>,
    files: Vec<(PathBuf, File)>,
}

impl Orphans {
    /// Removes the segments, once their receipts are stored.
    pub fn discard(self) -> io::Result<()> {
        for (path, _lock) in self.files {
            fs::remove_file(path)?;
        }
        Ok(())
    }
}

fn segment_path(dir: &Path, stem: &str, seq: u64) -> PathBuf {
    dir.join(format!("{stem}{seq}{SUFFIX}"))
}

fn create_segment(dir: &Path, stem: &str, seq: u64) -> io::Result<File> {
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(segment_path(dir, stem, seq))?;
    file.try_lock().map_err(|err| match err {
        fs::TryLockError::Error(err) => err,
        fs::TryLockError::WouldBlock => io::Error::other("a new journal segment is locked"),
    })?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use herma_core::model::{ReceiptAction, ReceiptBody, Timings};
    use herma_core::{CallerScope, Timestamp};

    use super::*;

    fn receipt(n: usize) -> InjectionReceipt {
        ReceiptBody {
            caller_scope: CallerScope::parse("key:0123456789abcdef").unwrap(),
            protocol: "messages".into(),
            conversation_id: "c".into(),
            model: "m".into(),
            action: ReceiptAction::Forwarded,
            matched: vec![],
            shimmed_context_refs: vec![],
            unresolved_context_refs: vec![],
            upstream_status: Some(200),
            usage: None,
            timings: Timings::default(),
            stream_end: None,
            error: None,
            created_at: Timestamp::from_millis(n as i64),
        }
        .seal(format!("rcpt_{n:04}"))
    }

    fn segments(dir: &Path) -> usize {
        fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn a_live_journal_is_not_an_orphan_and_a_dropped_one_is_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let first = FileJournal::open(dir.path()).unwrap();
        for n in 0..3 {
            first.append(&receipt(n)).unwrap();
        }
        let second = FileJournal::open(dir.path()).unwrap();
        assert!(
            second.orphans().unwrap().receipts.is_empty(),
            "a live process's segment is left alone"
        );
        drop(first);
        let orphans = second.orphans().unwrap();
        let ids: Vec<&str> = orphans.receipts.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["rcpt_0000", "rcpt_0001", "rcpt_0002"]);
        assert!(orphans.receipts.iter().all(InjectionReceipt::verifies));
        orphans.discard().unwrap();
        assert_eq!(segments(dir.path()), 1, "only the live segment remains");
    }

    #[test]
    fn a_torn_last_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        journal.append(&receipt(0)).unwrap();
        let line = serde_json::to_string(&receipt(1)).unwrap();
        let path = segment_path(dir.path(), &journal.stem, 0);
        OpenOptions::new()
            .append(true)
            .open(path)
            .unwrap()
            .write_all(&line.as_bytes()[..line.len() / 2])
            .unwrap();
        drop(journal);
        let reader = FileJournal::open(dir.path()).unwrap();
        let orphans = reader.orphans().unwrap();
        assert_eq!(orphans.receipts.len(), 1);
        assert_eq!(orphans.receipts[0].id, "rcpt_0000");
    }

    #[test]
    fn stored_segments_are_removed_after_rotation_and_unstored_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let journal = FileJournal::open(dir.path()).unwrap();
        let mut marks = Vec::new();
        let mut n = 0;
        while journal.state.lock().unwrap().bytes < ROTATE_BYTES {
            marks.push(journal.append(&receipt(n)).unwrap());
            n += 1;
        }
        // One receipt of the full segment is not stored yet: rotation keeps the segment.
        let last = marks.pop().unwrap();
        journal.committed(&marks);
        assert_eq!(segments(dir.path()), 2, "rotated, the old segment kept");
        let next = journal.append(&receipt(n)).unwrap();
        assert_ne!(next, last, "appends go to the new segment");
        journal.committed(&[last]);
        assert_eq!(segments(dir.path()), 1, "the stored segment is removed");
        journal.committed(&[next]);
        assert_eq!(segments(dir.path()), 1, "the current segment stays");
        journal.close();
        assert_eq!(
            segments(dir.path()),
            0,
            "a clean stop leaves nothing to recover"
        );
    }
}
