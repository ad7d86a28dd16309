//! Client for a transcriber speaking whisper.cpp's server API.
//!
//! `POST {base}/inference`, multipart/form-data with `file` (a 16-bit PCM wav),
//! `response_format=json`, `temperature=0` and, when configured, `language`; the answer is
//! `{"text": "..."}`. whisper.cpp's `whisper-server` speaks this, and so do several other
//! servers that copied its API.
//!
//! Behind the `http-transcriber` feature (on by default): it brings an HTTP client and a TLS
//! stack, which a pipeline that never listens back does not need.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::blocking::{multipart, Client};
use reqwest::{StatusCode, Url};

use crate::transcriber::{wav_bytes, Transcribe};
use crate::VerifyError;

/// Answers larger than this are not read: `{"text": …}` for ten minutes of speech is a few KiB.
const MAX_ANSWER_BYTES: u64 = 1 << 20;

/// How much of an error body is quoted in an error message.
const QUOTED_BODY_CHARS: usize = 200;

/// Settings of a [`Transcriber`]; [`TranscriberConfig::new`] gives the defaults.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TranscriberConfig {
    /// `host:port`, or a base URL such as `http://host:port` or `http://host:port/asr`;
    /// `/inference` is appended. Plain HTTP only.
    pub address: String,
    /// Sent as `language` when set (`"en"`, `"fi"`, `"auto"` to detect). When unset the server
    /// uses its own default, which for whisper.cpp's server is English.
    pub language: Option<String>,
    /// Time allowed to open the connection. Default 3 s: the transcriber is on the local network.
    pub connect_timeout: Duration,
    /// Time allowed for the whole request, transcription included. Default 60 s.
    pub timeout: Duration,
    /// How many more times a request that got no answer (connection failure, timeout, 5xx, 429,
    /// empty text) is sent. Default 3.
    pub retries: u32,
    /// Wait before the first resend; doubled for each further one. Default 250 ms, so a busy
    /// or reloading server gets about 1.75 s in all.
    pub backoff: Duration,
}

impl TranscriberConfig {
    /// Sets the time allowed to open the connection.
    #[must_use]
    pub fn with_connect_timeout(mut self, value: Duration) -> Self {
        self.connect_timeout = value;
        self
    }
    /// Sets the time allowed for a whole request.
    #[must_use]
    pub fn with_timeout(mut self, value: Duration) -> Self {
        self.timeout = value;
        self
    }
    /// Sets how many more times an unanswered request is sent.
    #[must_use]
    pub fn with_retries(mut self, value: u32) -> Self {
        self.retries = value;
        self
    }
    /// Sets the wait before the first resend (doubled for each further one).
    #[must_use]
    pub fn with_backoff(mut self, value: Duration) -> Self {
        self.backoff = value;
        self
    }

    /// Defaults for the transcriber at `address`.
    pub fn new(address: impl Into<String>, language: Option<String>) -> Self {
        Self {
            address: address.into(),
            language,
            connect_timeout: Duration::from_secs(3),
            timeout: Duration::from_secs(60),
            retries: 3,
            backoff: Duration::from_millis(250),
        }
    }
}

/// HTTP client for a whisper.cpp-compatible `/inference` endpoint.
///
/// Uses a blocking HTTP client: call it from a plain thread (the model thread), not from
/// inside an async runtime.
#[derive(Debug)]
pub struct Transcriber {
    endpoint: Url,
    language: Option<String>,
    retries: u32,
    backoff: Duration,
    client: Client,
    /// Set when the last call ended without an answer. The next call then tries once, without
    /// waiting: a transcriber that is down should not cost every chunk the whole backoff. Any
    /// answer clears it.
    unanswered: AtomicBool,
}

/// What one HTTP exchange came to.
enum Exchange {
    Answer(String),
    /// No answer this time; worth asking again.
    NoAnswer(String),
}

fn endpoint_of(address: &str) -> Result<Url, VerifyError> {
    let bad = |reason: String| VerifyError::Address { address: address.to_string(), reason };
    let trimmed = address.trim();
    if trimmed.is_empty() {
        return Err(bad("it is empty".into()));
    }
    let with_scheme = if trimmed.contains("://") { trimmed.to_string() } else { format!("http://{trimmed}") };
    let mut url = Url::parse(&with_scheme).map_err(|e| bad(e.to_string()))?;
    if url.scheme() != "http" {
        return Err(bad(format!("scheme {:?} is not supported; transcribers are reached over plain http", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it names no host".into()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("it has a query or fragment; give host:port or a base URL".into()));
    }
    let path = url.path().trim_end_matches('/');
    let path = if path.ends_with("/inference") { path.to_string() } else { format!("{path}/inference") };
    url.set_path(&path);
    Ok(url)
}

fn quote(body: &str) -> String {
    let trimmed = body.trim();
    let mut quoted: String = trimmed.chars().take(QUOTED_BODY_CHARS).collect();
    if quoted.len() < trimmed.len() {
        quoted.push('…');
    }
    quoted
}

impl Transcriber {
    /// A client with default timeouts and retries for `host:port` (or a base URL).
    pub fn new(address: &str, language: Option<String>) -> Result<Self, VerifyError> {
        Self::with_config(TranscriberConfig::new(address, language))
    }

    /// A client with explicit settings.
    pub fn with_config(config: TranscriberConfig) -> Result<Self, VerifyError> {
        let endpoint = endpoint_of(&config.address)?;
        if let Some(language) = &config.language {
            let ok =
                !language.is_empty() && language.len() <= 16 && language.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !ok {
                return Err(VerifyError::Config(format!("language {language:?} is not a language code such as \"en\" or \"auto\"")));
            }
        }
        // The workspace builds reqwest with rustls but no bundled crypto provider (the hub
        // installs ring); reqwest refuses to build any client, even a plain-HTTP one, until a
        // provider is installed. If one already is, this does nothing.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.timeout)
            .build()
            .map_err(|e| VerifyError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            endpoint,
            language: config.language,
            retries: config.retries,
            backoff: config.backoff,
            client,
            unanswered: AtomicBool::new(false),
        })
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// The language sent with each request, if any.
    pub fn language(&self) -> Option<&str> {
        self.language.as_deref()
    }

    /// What was said in `samples`; `Ok(None)` when the transcriber gave no answer after the
    /// retries. See [`Transcribe::transcribe`].
    pub fn transcribe(&self, samples: &[f32], rate: u32) -> Result<Option<String>, VerifyError> {
        let wav = wav_bytes(samples, rate)?;
        if samples.is_empty() {
            // Nothing to hear is a certain answer, and some servers fail on an empty file.
            return Ok(Some(String::new()));
        }
        let tries = if self.unanswered.load(Ordering::Relaxed) { 1 } else { 1 + u64::from(self.retries) };
        let mut wait = self.backoff;
        for attempt in 0..tries {
            if attempt > 0 {
                std::thread::sleep(wait);
                wait = wait.saturating_mul(2);
            }
            match self.exchange(&wav)? {
                Exchange::Answer(text) => {
                    self.unanswered.store(false, Ordering::Relaxed);
                    return Ok(Some(text));
                }
                Exchange::NoAnswer(_reason) => {}
            }
        }
        self.unanswered.store(true, Ordering::Relaxed);
        Ok(None)
    }

    fn exchange(&self, wav: &[u8]) -> Result<Exchange, VerifyError> {
        let file = multipart::Part::bytes(wav.to_vec())
            .file_name("audio.wav")
            .mime_str("audio/wav")
            .map_err(|e| VerifyError::Config(format!("cannot label the upload: {e}")))?;
        let mut form = multipart::Form::new().part("file", file).text("response_format", "json").text("temperature", "0");
        if let Some(language) = &self.language {
            form = form.text("language", language.clone());
        }
        let response = match self.client.post(self.endpoint.clone()).multipart(form).send() {
            Ok(r) => r,
            // Refused, reset, timed out: the server may be starting or busy.
            Err(e) => return Ok(Exchange::NoAnswer(e.to_string())),
        };
        let status = response.status();
        let mut body = Vec::new();
        if let Err(e) = response.take(MAX_ANSWER_BYTES + 1).read_to_end(&mut body) {
            return Ok(Exchange::NoAnswer(format!("reading the answer failed: {e}")));
        }
        let body_text = String::from_utf8_lossy(&body);
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Ok(Exchange::NoAnswer(format!("HTTP {status}")));
        }
        if !status.is_success() {
            return Err(VerifyError::Rejected { endpoint: self.endpoint.to_string(), status: status.as_u16(), body: quote(&body_text) });
        }
        if body.len() as u64 > MAX_ANSWER_BYTES {
            return Err(self.bad_answer(format!("the answer is larger than {MAX_ANSWER_BYTES} bytes")));
        }
        let value: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| self.bad_answer(format!("not JSON ({e}): {}", quote(&body_text))))?;
        if let Some(text) = value.get("text").and_then(serde_json::Value::as_str) {
            let text = text.trim();
            return Ok(if text.is_empty() { Exchange::NoAnswer("empty text".into()) } else { Exchange::Answer(text.to_string()) });
        }
        // whisper.cpp reports some failures as 200 with {"error": "..."}.
        match value.get("error") {
            Some(error) => Err(self.bad_answer(format!("the transcriber reported an error: {}", quote(&error.to_string())))),
            None => Err(self.bad_answer(format!("no \"text\" field in {}", quote(&body_text)))),
        }
    }

    fn bad_answer(&self, reason: String) -> VerifyError {
        VerifyError::Answer { endpoint: self.endpoint.to_string(), reason }
    }
}

impl Transcribe for Transcriber {
    fn transcribe(&self, samples: &[f32], rate: u32) -> Result<Option<String>, VerifyError> {
        Transcriber::transcribe(self, samples, rate)
    }

    fn describe(&self) -> String {
        match &self.language {
            Some(language) => format!("{} (language {language})", self.endpoint),
            None => self.endpoint.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_become_inference_urls() {
        let url = |a: &str| endpoint_of(a).map(|u| u.to_string());
        assert_eq!(url("127.0.0.1:8080").ok().as_deref(), Some("http://127.0.0.1:8080/inference"));
        assert_eq!(url("http://asr.lan:6543/").ok().as_deref(), Some("http://asr.lan:6543/inference"));
        assert_eq!(url("http://asr.lan/whisper").ok().as_deref(), Some("http://asr.lan/whisper/inference"));
        assert_eq!(url("http://asr.lan:1/inference").ok().as_deref(), Some("http://asr.lan:1/inference"));
        assert!(matches!(endpoint_of("https://asr.lan"), Err(VerifyError::Address { .. })));
        assert!(matches!(endpoint_of(""), Err(VerifyError::Address { .. })));
        assert!(matches!(endpoint_of("host:notaport"), Err(VerifyError::Address { .. })));
        assert!(matches!(endpoint_of("http://h:1/?q=1"), Err(VerifyError::Address { .. })));
    }

    #[test]
    fn language_must_be_a_code() {
        assert!(Transcriber::new("127.0.0.1:1", Some("en".into())).is_ok());
        assert!(Transcriber::new("127.0.0.1:1", Some("auto".into())).is_ok());
        assert!(matches!(Transcriber::new("127.0.0.1:1", Some("e n".into())), Err(VerifyError::Config(_))));
    }
}
