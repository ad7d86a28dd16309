use std::path::PathBuf;

/// Every way audio input or processing can fail. Messages name the offending file, field or value
/// so a user can tell a broken input from a bug.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    #[error("cannot read audio file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("audio input {what} is empty (0 bytes)")]
    EmptyInput { what: String },
    #[error("audio input {what} is not a decodable audio file: {detail}")]
    NotAudio { what: String, detail: String },
    #[error("audio input {what} has an unsupported sample format: {detail}")]
    UnsupportedFormat { what: String, detail: String },
    #[error("audio input {what} declares {channels} channels; expected 1 to {max}")]
    BadChannelCount { what: String, channels: u32, max: u32 },
    #[error("sample rate {rate} Hz ({what}) is outside the supported range 1..={max} Hz")]
    BadSampleRate { what: String, rate: u64, max: u32 },
    #[error("audio input {what} contains no samples")]
    NoSamples { what: String },
    #[error("audio input {what} has a non-finite sample (NaN or infinity) at index {index}")]
    NonFiniteSample { what: String, index: usize },
    #[error("audio input {what} is too long: {samples} samples exceeds the limit of {limit}")]
    TooLong { what: String, samples: u64, limit: u64 },
    #[error(
        "waveform of {len} samples is too short for the mel spectrogram: reflect padding of {pad} \
         samples needs at least {min} samples"
    )]
    TooShortForMel { len: usize, pad: usize, min: usize },
    #[error("resampling {from} Hz to {to} Hz of {len} samples would produce {out} samples, over the limit of {limit}")]
    ResampleTooLarge { from: u32, to: u32, len: usize, out: u64, limit: u64 },
    #[error("channel layout mismatch: {detail}")]
    ChannelMismatch { detail: String },
    #[error("FFT failed: {0}")]
    Fft(String),
    #[error("cannot write WAV file {path}: {detail}")]
    WavWrite { path: PathBuf, detail: String },
    #[error("unknown audio format \"{name}\"; known formats: {known}")]
    UnknownFormat { name: String, known: String },
    #[error("unknown audio file extension \"{extension}\"; known extensions: {known}")]
    UnknownExtension { extension: String, known: String },
    #[error("audio format {name} is not available: {reason}")]
    FormatUnavailable { name: String, reason: &'static str },
    #[error("{format} output cannot use {what} {value}; supported: {supported}")]
    EncoderSetting { format: String, what: &'static str, value: u64, supported: String },
    #[error("{format} encoder failed: {detail}")]
    Encode { format: String, detail: String },
    #[error("{format} output: {len} interleaved samples is not a whole number of {channels}-channel frames")]
    PartialFrame { format: String, len: usize, channels: u16 },
    #[error("{format} encoder was already finished; start a new one for a new stream")]
    EncoderFinished { format: String },
}

pub type Result<T> = std::result::Result<T, AudioError>;
