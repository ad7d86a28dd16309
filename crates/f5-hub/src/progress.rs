use std::sync::Arc;

/// What a download reports as it goes; the caller draws it (the CLI as a bar on stderr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress<'a> {
    /// A transfer begins. `resumed_from` bytes were already on disk from an earlier attempt;
    /// `total` is the whole file's size when the hub said it.
    Start {
        /// The file's name as the user would recognise it (`owner/repo/path`).
        file: &'a str,
        /// Its size, when known.
        total: Option<u64>,
        /// Bytes already on disk.
        resumed_from: u64,
    },
    /// `done` bytes of the file are on disk now (including any resumed part).
    Advance {
        /// The file.
        file: &'a str,
        /// Bytes on disk.
        done: u64,
        /// Its size, when known.
        total: Option<u64>,
    },
    /// The transfer completed; the file is checked and moved into the cache next.
    Finish {
        /// The file.
        file: &'a str,
    },
}

/// A progress callback, shared with every download the hub makes.
pub type ProgressFn = Arc<dyn Fn(&Progress<'_>) + Send + Sync>;
