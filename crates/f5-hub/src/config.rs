use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where things live and how to reach the hub. Built from the environment by
/// [`HubConfig::from_env`], or from any variable lookup by [`HubConfig::from_vars`] so tests (and
/// embedders) never have to mutate the process environment.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HubConfig {
    /// `$F5_HOME`, default `~/.f5`; local models are `models/<id>/` in it.
    pub f5_home: PathBuf,
    /// The Hugging Face hub cache: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub` (honouring `XDG_CACHE_HOME`), exactly as huggingface_hub picks it.
    pub hub_cache: PathBuf,
    /// `$HF_ENDPOINT` without a trailing `/`, default `https://huggingface.co`.
    pub endpoint: String,
    /// `$HF_TOKEN`, else the token file `huggingface-cli login` writes (`$HF_HOME/token`).
    pub token: Option<String>,
    /// `$HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) set to 1/ON/YES/TRUE: no network at all.
    pub offline: bool,
    /// How many times one download is tried before giving up; each retry resumes.
    pub max_attempts: usize,
    /// Pause before a retry, so a flapping link gets a moment.
    pub retry_delay: Duration,
    /// Connect timeout, and the longest a read may stall.
    pub timeout: Duration,
}

pub(crate) const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

impl HubConfig {
    /// Sets offline mode (no network at all; the cache must have every file).
    #[must_use]
    pub fn with_offline(mut self, value: bool) -> Self {
        self.offline = value;
        self
    }
    /// Sets the hub's base URL (a mirror, or a test server).
    #[must_use]
    pub fn with_endpoint(mut self, value: String) -> Self {
        self.endpoint = value;
        self
    }
    /// Sets the token sent to the endpoint's own host.
    #[must_use]
    pub fn with_token(mut self, value: Option<String>) -> Self {
        self.token = value;
        self
    }
    /// Sets how many times one download is tried.
    #[must_use]
    pub fn with_max_attempts(mut self, value: usize) -> Self {
        self.max_attempts = value;
        self
    }
    /// Sets the pause before a retry.
    #[must_use]
    pub fn with_retry_delay(mut self, value: Duration) -> Self {
        self.retry_delay = value;
        self
    }
    /// Sets the connect timeout and the longest stall of a read.
    #[must_use]
    pub fn with_timeout(mut self, value: Duration) -> Self {
        self.timeout = value;
        self
    }

    /// The settings from the process environment: `F5_HOME`, `HF_HOME`, `HF_HUB_CACHE` (or
    /// `HUGGINGFACE_HUB_CACHE`), `HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`).
    pub fn from_env() -> HubConfig {
        HubConfig::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads the same variables as [`from_env`](Self::from_env) through `var`; an empty value
    /// counts as unset.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> HubConfig {
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        let home = var("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
        let expand = |value: String| expand_tilde(&value, &home);

        let f5_home = var("F5_HOME").map(expand).unwrap_or_else(|| home.join(".f5"));
        let hf_home = var("HF_HOME")
            .map(expand)
            .unwrap_or_else(|| var("XDG_CACHE_HOME").map(expand).unwrap_or_else(|| home.join(".cache")).join("huggingface"));
        let hub_cache = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")).map(expand).unwrap_or_else(|| hf_home.join("hub"));
        let endpoint = var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()).trim_end_matches('/').to_string();
        let token = var("HF_TOKEN").or_else(|| read_token_file(&hf_home.join("token")));
        let offline = var("HF_HUB_OFFLINE").or_else(|| var("TRANSFORMERS_OFFLINE")).is_some_and(|v| is_true(&v));
        HubConfig {
            f5_home,
            hub_cache,
            endpoint,
            token,
            offline,
            max_attempts: 5,
            retry_delay: Duration::from_secs(1),
            timeout: Duration::from_secs(60),
        }
    }

    /// `$F5_HOME/models`.
    pub fn models_dir(&self) -> PathBuf {
        self.f5_home.join("models")
    }
}

/// huggingface_hub's `ENV_VARS_TRUE_VALUES`.
fn is_true(value: &str) -> bool {
    matches!(value.to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
}

fn expand_tilde(value: &str, home: &Path) -> PathBuf {
    match value.strip_prefix('~') {
        Some("") => home.to_path_buf(),
        Some(rest) if rest.starts_with('/') => home.join(rest.trim_start_matches('/')),
        _ => PathBuf::from(value),
    }
}

fn read_token_file(path: &Path) -> Option<String> {
    // A token is a short line; a large file here is not a token.
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > 4096 {
        return None;
    }
    let token = std::fs::read_to_string(path).ok()?.trim().to_string();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> HubConfig {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        HubConfig::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_follow_huggingface_hub() {
        let c = config(&[("HOME", "/home/u")]);
        assert_eq!(c.f5_home, PathBuf::from("/home/u/.f5"));
        assert_eq!(c.hub_cache, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert_eq!(c.endpoint, "https://huggingface.co");
        assert!(!c.offline);
        let c = config(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(c.hub_cache, PathBuf::from("/x/huggingface/hub"));
        let c = config(&[("HOME", "/home/u"), ("HF_HOME", "~/hf"), ("HF_HUB_OFFLINE", "yes"), ("HF_ENDPOINT", "http://m/")]);
        assert_eq!(c.hub_cache, PathBuf::from("/home/u/hf/hub"));
        assert!(c.offline);
        assert_eq!(c.endpoint, "http://m");
        let c = config(&[("HOME", "/home/u"), ("HF_HOME", "/a"), ("HF_HUB_CACHE", "/b"), ("HF_HUB_OFFLINE", "0")]);
        assert_eq!(c.hub_cache, PathBuf::from("/b"));
        assert!(!c.offline);
    }
}
