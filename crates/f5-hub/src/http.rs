//! Talking to the hub: one HEAD for a file's metadata, one GET (resumable) for its bytes.
//!
//! Redirects are followed by hand rather than by the client, because the hub's first answer
//! carries the metadata (`X-Repo-Commit`, `X-Linked-Etag`, `X-Linked-Size`) and points LFS files
//! at a CDN on another host, which must never receive the token.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::OnceLock;

use reqwest::blocking::{Client, Response};
use reqwest::header::{HeaderMap, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, ETAG, LOCATION, RANGE};
use reqwest::{StatusCode, Url};
use sha2::{Digest, Sha256};

use crate::cache::RepoCache;
use crate::config::HubConfig;
use crate::error::{HubError, Result};
use crate::name::{is_safe_etag, is_sha256_hex, normalize_etag, quote, Reference};
use crate::progress::{Progress, ProgressFn};

const MAX_REDIRECTS: usize = 5;
const CHUNK: usize = 1 << 16;

/// What the hub says about one file at one revision.
#[derive(Debug, Clone)]
pub(crate) struct FileMeta {
    pub commit: String,
    pub etag: String,
    pub size: Option<u64>,
    /// Where the bytes are: the resolve URL itself, or the CDN it redirects to.
    pub download_url: Url,
}

pub(crate) enum Head {
    Found(FileMeta),
    /// The repository and revision exist but the file does not; the commit lets the absence be
    /// remembered in the cache.
    EntryNotFound {
        commit: Option<String>,
    },
}

pub(crate) struct Remote {
    endpoint: String,
    token: Option<String>,
    timeout: std::time::Duration,
    client: OnceLock<std::result::Result<Client, String>>,
}

impl Remote {
    pub(crate) fn new(config: &HubConfig) -> Remote {
        Remote { endpoint: config.endpoint.clone(), token: config.token.clone(), timeout: config.timeout, client: OnceLock::new() }
    }

    /// Built on first use, so offline runs and cache hits never load TLS roots.
    fn client(&self) -> Result<&Client> {
        let built = self.client.get_or_init(|| {
            // reqwest is built without a bundled crypto provider; ring is ours. If the process
            // already installed one, that one is used and this does nothing.
            let _ = rustls::crypto::ring::default_provider().install_default();
            Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(self.timeout)
                // In the blocking client this bounds each read, not the whole transfer.
                .timeout(self.timeout)
                .user_agent(concat!("f5-hub/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| {
                    let mut message = e.to_string();
                    let mut source = std::error::Error::source(&e);
                    while let Some(s) = source {
                        message.push_str(": ");
                        message.push_str(&s.to_string());
                        source = s.source();
                    }
                    message
                })
        });
        built.as_ref().map_err(|message| HubError::ClientSetup(message.clone()))
    }

    pub(crate) fn resolve_url(&self, reference: &Reference) -> String {
        format!(
            "{}/{}/{}/resolve/{}/{}",
            self.endpoint,
            reference.owner,
            reference.repo,
            quote(&reference.revision, b""),
            quote(&reference.path, b"/")
        )
    }

    /// The token goes only to the endpoint's own origin: a redirect to a CDN gets none.
    fn authorize(&self, request: reqwest::blocking::RequestBuilder, url: &Url) -> reqwest::blocking::RequestBuilder {
        match (&self.token, Url::parse(&self.endpoint)) {
            (Some(token), Ok(endpoint)) if same_origin(url, &endpoint) => request.header(AUTHORIZATION, format!("Bearer {token}")),
            _ => request,
        }
    }

    pub(crate) fn head(&self, reference: &Reference) -> Result<Head> {
        let client = self.client()?;
        let first = self.resolve_url(reference);
        let mut url =
            Url::parse(&first).map_err(|e| HubError::BadHeader { url: first.clone(), header: "HF_ENDPOINT", value: e.to_string() })?;
        for _ in 0..=MAX_REDIRECTS {
            let request = self.authorize(client.head(url.clone()).header(ACCEPT_ENCODING, "identity"), &url);
            let response = request.send().map_err(|source| HubError::Network { url: url.to_string(), source })?;
            let status = response.status();
            if status.is_redirection() {
                let location = header_str(response.headers(), LOCATION.as_str())
                    .ok_or(HubError::MissingHeader { url: url.to_string(), header: "Location" })?;
                let next = url.join(location).map_err(|_| HubError::BadHeader {
                    url: url.to_string(),
                    header: "Location",
                    value: location.to_string(),
                })?;
                // A relative redirect is the hub itself (a renamed repository): follow it and
                // ask again. An absolute one is the file's storage: the metadata is here.
                if Url::parse(location).is_err() {
                    url = next;
                    continue;
                }
                return Ok(Head::Found(meta_from(&url, response.headers(), true, next)?));
            }
            if status.is_success() {
                return Ok(Head::Found(meta_from(&url, response.headers(), false, url.clone())?));
            }
            return match self.status_error(&url, &response, status) {
                Ok(error) => Err(error),
                Err(commit) => Ok(Head::EntryNotFound { commit }),
            };
        }
        Err(HubError::TooManyRedirects { url: first, max: MAX_REDIRECTS })
    }

    /// Maps an error status to the error that explains it, or to `Err(commit)` for a missing
    /// file in an existing repository (not an error for an optional file).
    fn status_error(&self, url: &Url, response: &Response, status: StatusCode) -> std::result::Result<HubError, Option<String>> {
        let url = url.to_string();
        let code = status.as_u16();
        let error_code = header_str(response.headers(), "x-error-code").unwrap_or_default();
        Ok(match code {
            401 | 403 if self.token.is_none() => HubError::AuthRequired { url, status: code },
            401 | 403 => HubError::AccessDenied { url, status: code },
            404 => match error_code {
                "EntryNotFound" => {
                    return Err(header_str(response.headers(), "x-repo-commit").filter(|c| is_safe_etag(c)).map(str::to_string))
                }
                "RevisionNotFound" => HubError::RemoteNotFound { url, what: "revision" },
                "RepoNotFound" => HubError::RemoteNotFound { url, what: "repository" },
                _ => HubError::RemoteNotFound { url, what: "file" },
            },
            _ => HubError::HttpStatus { url, status: code },
        })
    }

    /// Fetches `meta`'s blob into the cache: under the blob's lock, resuming
    /// `blobs/{etag}.incomplete`, checked against the size and (LFS) sha256, renamed into place.
    /// `recheck` re-hashes an existing blob and replaces it when it is corrupt.
    pub(crate) fn fetch_blob(
        &self,
        cache: &RepoCache,
        meta: &FileMeta,
        label: &str,
        config: &HubConfig,
        progress: Option<&ProgressFn>,
        recheck: bool,
    ) -> Result<()> {
        let blob = cache.blob(&meta.etag);
        let lock_path = cache.lock_file(&meta.etag);
        if let Some(dir) = lock_path.parent() {
            fs::create_dir_all(dir).map_err(HubError::io(dir))?;
        }
        let lock = OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(HubError::io(&lock_path))?;
        // Held until `lock` is dropped; a second process (or thread) fetching the same blob
        // waits here and then finds the blob in place. Python's huggingface_hub takes the same
        // flock on the same file.
        lock.lock().map_err(HubError::io(&lock_path))?;

        if blob.is_file() {
            if !recheck || verify(&blob, meta).is_ok() {
                return Ok(());
            }
            fs::remove_file(&blob).map_err(HubError::io(&blob))?;
        }
        if let Some(dir) = blob.parent() {
            fs::create_dir_all(dir).map_err(HubError::io(dir))?;
        }
        cache.tag_cache_dir();
        let partial = cache.incomplete(&meta.etag);
        let url = meta.download_url.to_string();
        let mut last_error = None;
        for attempt in 0..config.max_attempts.max(1) {
            if attempt > 0 {
                std::thread::sleep(config.retry_delay);
            }
            let outcome = self.download(meta, &partial, label, progress).and_then(|()| verify(&partial, meta));
            match outcome {
                Ok(()) => {
                    fs::rename(&partial, &blob).map_err(HubError::io(&blob))?;
                    return Ok(());
                }
                Err(error) => {
                    let wrong_bytes = match &error {
                        HubError::ChecksumMismatch { .. } => true,
                        HubError::SizeMismatch { expected, got, .. } => got > expected,
                        _ => false,
                    };
                    if wrong_bytes {
                        // The bytes on disk are wrong; resuming them would keep them wrong. A
                        // body that merely ended early is kept and resumed.
                        let _ = fs::remove_file(&partial);
                    }
                    if !is_retryable(&error) {
                        return Err(error);
                    }
                    last_error = Some(error);
                }
            }
        }
        let source = Box::new(last_error.unwrap_or(HubError::SizeMismatch { url: url.clone(), expected: 0, got: 0 }));
        Err(HubError::DownloadFailed { url, attempts: config.max_attempts.max(1), source })
    }

    /// One GET: continues `partial` from its current length with a Range request.
    fn download(&self, meta: &FileMeta, partial: &Path, label: &str, progress: Option<&ProgressFn>) -> Result<()> {
        let client = self.client()?;
        let mut offset = fs::metadata(partial).map(|m| m.len()).unwrap_or(0);
        if let Some(expected) = meta.size {
            if offset == expected {
                return Ok(());
            }
            if offset > expected {
                offset = 0;
            }
        }
        let mut url = meta.download_url.clone();
        let mut response = None;
        for _ in 0..=MAX_REDIRECTS {
            let mut request = client.get(url.clone()).header(ACCEPT_ENCODING, "identity");
            if offset > 0 {
                request = request.header(RANGE, format!("bytes={offset}-"));
            }
            let sent = self.authorize(request, &url).send().map_err(|source| HubError::Network { url: url.to_string(), source })?;
            if sent.status().is_redirection() {
                let location = header_str(sent.headers(), LOCATION.as_str())
                    .ok_or(HubError::MissingHeader { url: url.to_string(), header: "Location" })?;
                url = url.join(location).map_err(|_| HubError::BadHeader {
                    url: url.to_string(),
                    header: "Location",
                    value: location.to_string(),
                })?;
                continue;
            }
            response = Some(sent);
            break;
        }
        let mut response = response.ok_or(HubError::TooManyRedirects { url: meta.download_url.to_string(), max: MAX_REDIRECTS })?;
        let status = response.status();
        let url_text = url.to_string();
        match status {
            StatusCode::PARTIAL_CONTENT if offset > 0 => {
                let start = header_str(response.headers(), CONTENT_RANGE.as_str()).and_then(content_range_start);
                if start != Some(offset) {
                    // Not the bytes that were asked for: start over rather than splice.
                    truncate(partial, 0)?;
                    return Err(HubError::BadHeader {
                        url: url_text,
                        header: "Content-Range",
                        value: header_str(response.headers(), CONTENT_RANGE.as_str()).unwrap_or_default().to_string(),
                    });
                }
            }
            StatusCode::OK => {
                // The server ignored the Range header and sends everything again.
                offset = 0;
            }
            StatusCode::RANGE_NOT_SATISFIABLE => {
                truncate(partial, 0)?;
                return Err(HubError::HttpStatus { url: url_text, status: status.as_u16() });
            }
            _ => {
                return Err(self.status_error(&url, &response, status).unwrap_or(HubError::RemoteNotFound { url: url_text, what: "file" }));
            }
        }
        let body_len = header_u64(response.headers(), CONTENT_LENGTH.as_str());
        let expected = meta.size.or(body_len.map(|len| len + offset));
        let mut file = OpenOptions::new().create(true).truncate(false).write(true).open(partial).map_err(HubError::io(partial))?;
        file.set_len(offset).map_err(HubError::io(partial))?;
        file.seek(SeekFrom::Start(offset)).map_err(HubError::io(partial))?;

        if let Some(progress) = progress {
            progress(&Progress::Start { file: label, total: expected, resumed_from: offset });
        }
        let mut done = offset;
        let mut buffer = vec![0u8; CHUNK];
        loop {
            let read = match response.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    // Keep what arrived: the next attempt resumes after it.
                    let _ = file.sync_data();
                    return Err(HubError::Body { url: url_text, source });
                }
            };
            let chunk = buffer.get(..read).unwrap_or_default();
            if expected.is_some_and(|expected| done + read as u64 > expected) {
                return Err(HubError::SizeMismatch { url: url_text, expected: expected.unwrap_or(0), got: done + read as u64 });
            }
            file.write_all(chunk).map_err(HubError::io(partial))?;
            done += read as u64;
            if let Some(progress) = progress {
                progress(&Progress::Advance { file: label, done, total: expected });
            }
        }
        file.sync_all().map_err(HubError::io(partial))?;
        if let Some(expected) = expected {
            if done != expected {
                return Err(HubError::SizeMismatch { url: url_text, expected, got: done });
            }
        }
        if let Some(progress) = progress {
            progress(&Progress::Finish { file: label });
        }
        Ok(())
    }
}

/// Size against the hub's size, and content against the etag when the etag is a sha256 (LFS
/// files). Plain git files carry a git blob hash instead, which is not checked.
pub(crate) fn verify(path: &Path, meta: &FileMeta) -> Result<()> {
    let url = meta.download_url.to_string();
    let len = fs::metadata(path).map_err(HubError::io(path))?.len();
    if let Some(expected) = meta.size {
        if len != expected {
            return Err(HubError::SizeMismatch { url, expected, got: len });
        }
    }
    if is_sha256_hex(&meta.etag) {
        let got = sha256_file(path)?;
        if got != meta.etag {
            return Err(HubError::ChecksumMismatch { url, expected: meta.etag.clone(), got });
        }
    }
    Ok(())
}

pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(HubError::io(path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(HubError::io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(buffer.get(..n).unwrap_or_default());
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn truncate(path: &Path, len: u64) -> Result<()> {
    match OpenOptions::new().write(true).open(path) {
        Ok(file) => file.set_len(len).map_err(HubError::io(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(HubError::Io { path: path.to_path_buf(), source }),
    }
}

fn is_retryable(error: &HubError) -> bool {
    match error {
        HubError::Network { .. } | HubError::Body { .. } | HubError::SizeMismatch { .. } | HubError::ChecksumMismatch { .. } => true,
        HubError::BadHeader { header, .. } => *header == "Content-Range",
        HubError::HttpStatus { status, .. } => *status == 416 || *status == 408 || *status == 429 || *status >= 500,
        _ => false,
    }
}

fn meta_from(url: &Url, headers: &HeaderMap, redirected: bool, download_url: Url) -> Result<FileMeta> {
    let url_text = url.to_string();
    let commit = header_str(headers, "x-repo-commit").ok_or(HubError::MissingHeader { url: url_text.clone(), header: "X-Repo-Commit" })?;
    if !is_safe_etag(commit) {
        return Err(HubError::BadHeader { url: url_text, header: "X-Repo-Commit", value: commit.to_string() });
    }
    let raw_etag = header_str(headers, "x-linked-etag")
        .or_else(|| header_str(headers, ETAG.as_str()))
        .ok_or(HubError::MissingHeader { url: url_text.clone(), header: "ETag" })?;
    let etag = normalize_etag(raw_etag);
    if !is_safe_etag(&etag) {
        return Err(HubError::BadHeader { url: url_text, header: "ETag", value: raw_etag.to_string() });
    }
    // A redirect's own Content-Length is the length of the redirect body, not of the file.
    let size =
        header_u64(headers, "x-linked-size").or_else(|| if redirected { None } else { header_u64(headers, CONTENT_LENGTH.as_str()) });
    Ok(FileMeta { commit: commit.to_string(), etag, size, download_url })
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    header_str(headers, name).and_then(|v| v.parse().ok())
}

/// `bytes 100-199/200` → 100.
fn content_range_start(value: &str) -> Option<u64> {
    value.strip_prefix("bytes ")?.split('-').next()?.trim().parse().ok()
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme() && a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// reqwest is built without a crypto provider and panics at client construction when none
    /// is installed; this proves ring is wired in (no network involved).
    #[test]
    fn the_https_client_builds_with_the_ring_provider() {
        let config = HubConfig::from_vars(|name| (name == "HOME").then(|| "/nonexistent".to_string()));
        let remote = Remote::new(&config);
        assert!(remote.client().is_ok());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }

    #[test]
    fn origins() {
        let hub = Url::parse("https://huggingface.co").unwrap();
        assert!(same_origin(&Url::parse("https://huggingface.co:443/a/b").unwrap(), &hub));
        assert!(!same_origin(&Url::parse("https://cdn-lfs.hf.co/x").unwrap(), &hub));
        assert!(!same_origin(&Url::parse("http://huggingface.co/x").unwrap(), &hub));
        assert_eq!(content_range_start("bytes 100-199/200"), Some(100));
    }
}
