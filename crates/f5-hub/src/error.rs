use std::path::PathBuf;

/// Everything that can go wrong between a model name and a file on disk.
///
/// Each message names what was asked for and what was tried, because the person reading it
/// usually typed the name a moment ago and needs to know which of the three readings failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    #[error("empty model name: give a path, a local id or an owner/repo/file reference")]
    EmptyName,

    #[error("model name is {len} bytes long, more than the {max} accepted")]
    NameTooLong { len: usize, max: usize },

    #[error("'{name}' is not an existing path, and not a valid local id ({reason})")]
    InvalidName { name: String, reason: String },

    #[error("'{name}' is not an existing path, and not a valid owner/repo/file reference: {reason}")]
    InvalidReference { name: String, reason: String },

    /// The name reads as a path on this machine (see the crate docs), so it is not sent to the hub.
    #[error("'{name}': no such file or directory{suggestion}")]
    NoSuchPath { name: String, suggestion: String },

    #[error("'{name}' is not an existing path, and there is no local model '{name}' in {models_dir}")]
    UnknownLocalId { name: String, models_dir: PathBuf },

    #[error("no checkpoint (*.safetensors, *.pt) in {dir}")]
    NoCheckpoint { dir: PathBuf },

    #[error("several checkpoints in {dir} ({candidates}): name the file instead of the directory")]
    AmbiguousCheckpoint { dir: PathBuf, candidates: String },

    #[error("no vocab.txt beside the checkpoint in {dir}")]
    MissingVocab { dir: PathBuf },

    #[error("no vocoder weights (pytorch_model.bin or *.safetensors) in {dir}")]
    NoVocoderWeights { dir: PathBuf },

    #[error("'{reference}' names a whole repository; name the file in it (owner/repo/path/to/file)")]
    RepositoryNotAFile { reference: String },

    #[error("offline (HF_HUB_OFFLINE is set) and '{reference}' is not in the cache {cache}")]
    OfflineNotCached { reference: String, cache: PathBuf },

    #[error("{url} needs authentication (HTTP {status}): the repository is private or gated, or does not exist; set HF_TOKEN")]
    AuthRequired { url: String, status: u16 },

    #[error("{url} refused the token in HF_TOKEN (HTTP {status}): it lacks access to this repository, or the repository does not exist")]
    AccessDenied { url: String, status: u16 },

    #[error("{url}: {what} not found (HTTP 404)")]
    RemoteNotFound { url: String, what: &'static str },

    #[error("{url} answered HTTP {status}")]
    HttpStatus { url: String, status: u16 },

    #[error("could not reach {url}")]
    Network {
        url: String,
        #[source]
        source: reqwest::Error,
    },

    #[error("could not start the HTTP client: {0}")]
    ClientSetup(String),

    #[error("{url}: header {header} is missing, so this does not look like a Hugging Face Hub endpoint (check HF_ENDPOINT)")]
    MissingHeader { url: String, header: &'static str },

    #[error("{url}: header {header} has an unusable value '{value}'")]
    BadHeader { url: String, header: &'static str, value: String },

    #[error("{url}: more than {max} redirects")]
    TooManyRedirects { url: String, max: usize },

    #[error("download of {url} ended at {got} bytes, expected {expected}")]
    SizeMismatch { url: String, expected: u64, got: u64 },

    #[error("download of {url} has sha256 {got}, expected {expected}: refused")]
    ChecksumMismatch { url: String, expected: String, got: String },

    #[error("download of {url} failed after {attempts} attempts")]
    DownloadFailed {
        url: String,
        attempts: usize,
        #[source]
        source: Box<HubError>,
    },

    #[error("reading the body of {url} failed")]
    Body {
        url: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl HubError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> HubError {
        let path = path.into();
        move |source| HubError::Io { path, source }
    }
}

pub type Result<T, E = HubError> = std::result::Result<T, E>;
