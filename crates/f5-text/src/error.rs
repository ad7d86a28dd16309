use std::path::PathBuf;

/// Everything that can go wrong while reading text resources or converting text.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("cannot read vocabulary file {path}: {source}")]
    VocabIo { path: PathBuf, source: std::io::Error },
    #[error("vocabulary file {path} is {size} bytes, more than the {limit}-byte limit for a vocabulary")]
    VocabTooLarge { path: PathBuf, size: u64, limit: u64 },
    #[error("vocabulary file {path} is not valid UTF-8 (first bad byte at offset {offset})")]
    VocabEncoding { path: PathBuf, offset: usize },
    #[error("the embedded pinyin table is corrupt: {0}")]
    PinyinTable(String),
    /// The reference raises `IndexError` here: pypinyin returned fewer readings
    /// than the segment has characters, so there is no token stream to match.
    #[error(
        "segment {segment:?} has {chars} characters but only {readings} pinyin readings; the reference implementation fails on this input"
    )]
    SegmentMisaligned { segment: String, chars: usize, readings: usize },
}
