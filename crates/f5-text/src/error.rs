use std::path::PathBuf;

/// Everything that can go wrong while reading text resources or converting text.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// The vocabulary file could not be opened or read.
    #[error("cannot read vocabulary file {path}: {source}")]
    VocabIo {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file this large is not a vocabulary (a checkpoint given by mistake); refused unread.
    #[error("vocabulary file {path} is {size} bytes, more than the {limit}-byte limit for a vocabulary")]
    VocabTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
        /// The largest size accepted.
        limit: u64,
    },
    /// The vocabulary is not UTF-8, so its tokens cannot be matched with text.
    #[error("vocabulary file {path} is not valid UTF-8 (first bad byte at offset {offset})")]
    VocabEncoding {
        /// The file.
        path: PathBuf,
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },
    /// The pinyin table compiled into the crate does not decode (a broken build).
    #[error("the embedded pinyin table is corrupt: {0}")]
    PinyinTable(String),
    /// The reference raises `IndexError` here: pypinyin returned fewer readings
    /// than the segment has characters, so there is no token stream to match.
    #[error(
        "segment {segment:?} has {chars} characters but only {readings} pinyin readings; the reference implementation fails on this input"
    )]
    SegmentMisaligned {
        /// The segment of Chinese text.
        segment: String,
        /// Its characters.
        chars: usize,
        /// The readings the pinyin table gave.
        readings: usize,
    },
}
