//! What the command line reads, bounded: only regular files (a FIFO blocks forever, a device
//! like `/dev/zero` never ends), texts and recordings of sane sizes, a sane number of threads.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Longest text `f5 synth -f`, `tokens` and `chunks` read: a long book chapter. Synthesis time
/// grows with the text, so more than this is a mistake, not a job.
pub const MAX_TEXT_BYTES: u64 = 4 << 20;

/// More threads than cores only adds switching; the kit's pool is sized from this.
pub fn clamp_threads(asked: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if asked > cores {
        eprintln!("f5: --threads {asked} is more than the {cores} cores here; using {cores}");
        return cores;
    }
    asked
}

/// Fails unless `path` is a regular file (following links), saying what it is instead.
pub fn require_regular_file(path: &Path, what: &str) -> Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("{what} {}", path.display()))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device)" };
        bail!("{what} {} is {kind}; give a regular file", path.display());
    }
    Ok(())
}

/// A UTF-8 text file of at most [`MAX_TEXT_BYTES`], or standard input for `-`.
pub fn read_text(path: &Path) -> Result<String> {
    let mut bytes = Vec::new();
    if path == Path::new("-") {
        std::io::stdin().take(MAX_TEXT_BYTES + 1).read_to_end(&mut bytes).context("cannot read standard input")?;
    } else {
        require_regular_file(path, "text file")?;
        let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        file.take(MAX_TEXT_BYTES + 1).read_to_end(&mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
    }
    if bytes.len() as u64 > MAX_TEXT_BYTES {
        bail!("{}: the text is over {MAX_TEXT_BYTES} bytes; split it into smaller files", path.display());
    }
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))
}
