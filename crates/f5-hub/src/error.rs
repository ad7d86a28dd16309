use std::path::PathBuf;

/// Everything that can go wrong between a model name and a file on disk.
///
/// Each message names what was asked for and what was tried, because the person reading it
/// usually typed the name a moment ago and needs to know which of the three readings failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// Nothing was named.
    #[error("empty model name: give a path, a local id or an owner/repo/file reference")]
    EmptyName,

    /// A name longer than any path or reference could sensibly be.
    #[error("model name is {len} bytes long, more than the {max} accepted")]
    NameTooLong {
        /// Length of the name in bytes.
        len: usize,
        /// The most accepted.
        max: usize,
    },

    /// Not a path, and not a well-formed local id.
    #[error("'{name}' is not an existing path, and not a valid local id ({reason})")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Looks like a hub reference (it has a `/`) but is not a well-formed one.
    #[error("'{name}' is not an existing path, and not a valid owner/repo/file reference: {reason}")]
    InvalidReference {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The name reads as a path on this machine (see the crate docs), so it is not sent to the hub.
    #[error("'{name}': no such file or directory{suggestion}")]
    NoSuchPath {
        /// The name as given.
        name: String,
        /// "; did you mean …" with the nearest existing entries, or empty.
        suggestion: String,
    },

    /// A well-formed local id with no model under it.
    #[error("'{name}' is not an existing path, and there is no local model '{name}' in {models_dir}")]
    UnknownLocalId {
        /// The name as given.
        name: String,
        /// Where local models are looked for.
        models_dir: PathBuf,
    },

    /// A directory without a checkpoint file.
    #[error("no checkpoint (*.safetensors, *.pt) in {dir}")]
    NoCheckpoint {
        /// The directory.
        dir: PathBuf,
    },

    /// A directory with several checkpoints and no way to choose.
    #[error("several checkpoints in {dir} ({candidates}): name the file instead of the directory")]
    AmbiguousCheckpoint {
        /// The directory.
        dir: PathBuf,
        /// The checkpoints found.
        candidates: String,
    },

    /// An F5 checkpoint whose vocabulary is neither named nor beside it.
    #[error("no vocab.txt beside the checkpoint in {dir}")]
    MissingVocab {
        /// The directory.
        dir: PathBuf,
    },

    /// A vocoder directory without weights.
    #[error("no vocoder weights (pytorch_model.bin or *.safetensors) in {dir}")]
    NoVocoderWeights {
        /// The directory.
        dir: PathBuf,
    },

    /// A reference to a whole repository where one file is needed.
    #[error("'{reference}' names a whole repository; name the file in it (owner/repo/path/to/file)")]
    RepositoryNotAFile {
        /// The reference as given.
        reference: String,
    },

    /// Offline mode and the file is not in the cache: nothing can be done without the network.
    #[error("offline (HF_HUB_OFFLINE is set) and '{reference}' is not in the cache {cache}")]
    OfflineNotCached {
        /// The reference as given.
        reference: String,
        /// The cache that was searched.
        cache: PathBuf,
    },

    /// 401 without a token: private, gated or absent (the hub does not say which).
    #[error("{url} needs authentication (HTTP {status}): the repository is private or gated, or does not exist; set HF_TOKEN")]
    AuthRequired {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
    },

    /// 401/403 with a token: the token lacks access, or the repository is absent.
    #[error("{url} refused the token in HF_TOKEN (HTTP {status}): it lacks access to this repository, or the repository does not exist")]
    AccessDenied {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
    },

    /// 404: the repository, revision or file does not exist.
    #[error("{url}: {what} not found (HTTP 404)")]
    RemoteNotFound {
        /// The URL asked.
        url: String,
        /// What was not found (repository, revision or file).
        what: &'static str,
    },

    /// Another HTTP error status.
    #[error("{url} answered HTTP {status}")]
    HttpStatus {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
    },

    /// The endpoint could not be reached (DNS, connection, TLS, timeout).
    #[error("could not reach {url}")]
    Network {
        /// The URL asked.
        url: String,
        /// The underlying error.
        #[source]
        source: reqwest::Error,
    },

    /// The HTTP client could not be built (TLS provider, system roots).
    #[error("could not start the HTTP client: {0}")]
    ClientSetup(String),

    /// The answer lacks a header every Hugging Face endpoint sends: probably not a hub.
    #[error("{url}: header {header} is missing, so this does not look like a Hugging Face Hub endpoint (check HF_ENDPOINT)")]
    MissingHeader {
        /// The URL asked.
        url: String,
        /// The header's name.
        header: &'static str,
    },

    /// A header with a value that cannot be used (a malformed etag or size).
    #[error("{url}: header {header} has an unusable value '{value}'")]
    BadHeader {
        /// The URL asked.
        url: String,
        /// The header's name.
        header: &'static str,
        /// Its value.
        value: String,
    },

    /// A redirect loop or chain longer than allowed.
    #[error("{url}: more than {max} redirects")]
    TooManyRedirects {
        /// The URL asked.
        url: String,
        /// The most accepted.
        max: usize,
    },

    /// The download ended at another size than announced.
    #[error("download of {url} ended at {got} bytes, expected {expected}")]
    SizeMismatch {
        /// The URL asked.
        url: String,
        /// What was announced.
        expected: u64,
        /// What arrived.
        got: u64,
    },

    /// The download's sha256 is not the LFS etag: the file is refused and deleted.
    #[error("download of {url} has sha256 {got}, expected {expected}: refused")]
    ChecksumMismatch {
        /// The URL asked.
        url: String,
        /// What was announced.
        expected: String,
        /// What arrived.
        got: String,
    },

    /// Every attempt of a download failed; `source` is the last failure.
    #[error("download of {url} failed after {attempts} attempts")]
    DownloadFailed {
        /// The URL asked.
        url: String,
        /// Attempts made.
        attempts: usize,
        /// The underlying error.
        #[source]
        source: Box<HubError>,
    },

    /// Reading the answer's body failed mid-way.
    #[error("reading the body of {url} failed")]
    Body {
        /// The URL asked.
        url: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A cache or store file could not be read or written.
    #[error("{path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
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

/// Results of resolving and fetching.
pub type Result<T, E = HubError> = std::result::Result<T, E>;
