use std::path::PathBuf;

/// Every way audio input or processing can fail. Messages name the offending file, field or value
/// so a user can tell a broken input from a bug.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    /// The file could not be opened or read.
    #[error("cannot read audio file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Zero bytes: usually an upload or a path that went wrong before decoding.
    #[error("audio input {what} is empty (0 bytes)")]
    EmptyInput {
        /// The input: a path, or a name for in-memory data (an upload).
        what: String,
    },
    /// The bytes are not in any container or codec the decoder knows.
    #[error("audio input {what} is not a decodable audio file: {detail}")]
    NotAudio {
        /// The input: a path, or a name for in-memory data (an upload).
        what: String,
        /// What the library reported.
        detail: String,
    },
    /// A known container with a sample format the decoder does not convert.
    #[error("audio input {what} has an unsupported sample format: {detail}")]
    UnsupportedFormat {
        /// The input: a path, or a name for in-memory data (an upload).
        what: String,
        /// What the library reported.
        detail: String,
    },
    /// A channel count no real recording has (a corrupt or hostile header).
    #[error("audio input {what} declares {channels} channels; expected 1 to {max}")]
    BadChannelCount {
        /// The input: a path, or a name for in-memory data (an upload).
        what: String,
        /// The channel count.
        channels: u32,
        /// The largest value accepted.
        max: u32,
    },
    /// A sample rate outside what any audio path here supports.
    #[error("sample rate {rate} Hz ({what}) is outside the supported range 1..={max} Hz")]
    BadSampleRate {
        /// The input: a path, or a name for in-memory data (an upload).
        what: String,
        /// The rate given, in Hz.
        rate: u64,
        /// The largest value accepted.
        max: u32,
    },
    /// A valid header with no audio after it.
    #[error("audio input {what} contains no samples")]
    NoSamples {
        /// The input: a path, or a name for in-memory data (an upload).
        what: String,
    },
    /// A float sample that is NaN or infinite: it would poison every later stage.
    #[error("audio input {what} has a non-finite sample (NaN or infinity) at index {index}")]
    NonFiniteSample {
        /// The input: a path, or a name for in-memory data (an upload).
        what: String,
        /// Index of the first such sample.
        index: usize,
    },
    /// More samples than the caller's limit: refused before the memory is spent.
    #[error("audio input {what} is too long: {samples} samples exceeds the limit of {limit}")]
    TooLong {
        /// The input: a path, or a name for in-memory data (an upload).
        what: String,
        /// Samples the input has.
        samples: u64,
        /// The largest count accepted.
        limit: u64,
    },
    #[error(
        "waveform of {len} samples is too short for the mel spectrogram: reflect padding of {pad} \
         samples needs at least {min} samples"
    )]
    /// Fewer samples than the mel's reflect padding needs (as torch would refuse).
    TooShortForMel {
        /// Samples given.
        len: usize,
        /// Reflect padding on each side.
        pad: usize,
        /// Samples needed at least.
        min: usize,
    },
    /// Resampling would produce more samples than allowed.
    #[error("resampling {from} Hz to {to} Hz of {len} samples would produce {out} samples, over the limit of {limit}")]
    ResampleTooLarge {
        /// Input rate in Hz.
        from: u32,
        /// Output rate in Hz.
        to: u32,
        /// Samples given.
        len: usize,
        /// Samples the output would have.
        out: u64,
        /// The largest count accepted.
        limit: u64,
    },
    /// Channels that do not line up (interleaved data of the wrong length).
    #[error("channel layout mismatch: {detail}")]
    ChannelMismatch {
        /// What the library reported.
        detail: String,
    },
    /// The FFT library refused a plan or a buffer.
    #[error("FFT failed: {0}")]
    Fft(String),
    /// Writing a WAV file failed.
    #[error("cannot write WAV file {path}: {detail}")]
    WavWrite {
        /// The file.
        path: PathBuf,
        /// What the library reported.
        detail: String,
    },
    /// An output format name this crate does not encode.
    #[error("unknown audio format \"{name}\"; known formats: {known}")]
    UnknownFormat {
        /// The name given.
        name: String,
        /// The names that would work.
        known: String,
    },
    /// A file extension that names no output format.
    #[error("unknown audio file extension \"{extension}\"; known extensions: {known}")]
    UnknownExtension {
        /// The extension given.
        extension: String,
        /// The names that would work.
        known: String,
    },
    /// A known format whose encoder is not usable in this build or setting.
    #[error("audio format {name} is not available: {reason}")]
    FormatUnavailable {
        /// The name given.
        name: String,
        /// Why it is not available.
        reason: &'static str,
    },
    /// An encoder setting (rate, channels, bitrate) the format does not support.
    #[error("{format} output cannot use {what} {value}; supported: {supported}")]
    EncoderSetting {
        /// The output format.
        format: String,
        /// Which setting (sample rate, channels, bitrate).
        what: &'static str,
        /// The value given.
        value: u64,
        /// The values the format accepts.
        supported: String,
    },
    /// The encoder failed while encoding.
    #[error("{format} encoder failed: {detail}")]
    Encode {
        /// The output format.
        format: String,
        /// What the library reported.
        detail: String,
    },
    /// Interleaved samples that end mid-frame.
    #[error("{format} output: {len} interleaved samples is not a whole number of {channels}-channel frames")]
    PartialFrame {
        /// The output format.
        format: String,
        /// Samples given.
        len: usize,
        /// The channel count.
        channels: u16,
    },
    /// Samples pushed after the stream was finished.
    #[error("{format} encoder was already finished; start a new one for a new stream")]
    EncoderFinished {
        /// The output format.
        format: String,
    },
}

/// Results of this crate's decoding, processing and encoding.
pub type Result<T> = std::result::Result<T, AudioError>;
