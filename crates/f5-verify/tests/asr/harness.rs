//! Starts `tests/asr/server.py` (pocketsphinx behind whisper.cpp's `/inference` API) for a test,
//! and stops it when the test ends. Shared by the tests that need a real recogniser (this
//! crate's, f5-kokoro's and f5-cli's) with `#[path]`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The running server; killed when dropped.
pub struct AsrServer {
    child: Child,
    /// `host:port`, what `--transcriber` and `Transcriber::new` take.
    pub address: String,
}

impl Drop for AsrServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the server with the Python named by `F5_ASR_PYTHON`, exiting by itself after
/// `idle_exit_s` without a request; or says why it cannot (no such Python, no pocketsphinx).
pub fn start_asr_server(idle_exit_s: u32) -> Result<AsrServer, String> {
    let python = std::env::var("F5_ASR_PYTHON").map_err(|_| "F5_ASR_PYTHON is not set (a Python with pocketsphinx)".to_string())?;
    match Command::new(&python).args(["-c", "import pocketsphinx"]).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return Err(format!(
                "{python} cannot import pocketsphinx: {}",
                String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or("")
            ))
        }
        Err(e) => return Err(format!("cannot run {python}: {e}")),
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../f5-verify/tests/asr/server.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .args(["--port", "0", "--idle-exit", &idle_exit_s.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", script.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout from the ASR server")?;
    let (lines, first_line) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = lines.send(line);
    });
    let mut server = AsrServer { child, address: String::new() };
    // Loading the model takes a second or two; a minute means it is stuck.
    let line = first_line.recv_timeout(Duration::from_secs(60)).map_err(|_| "the ASR server did not start within 60 s".to_string())?;
    server.address = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("unexpected first line from the ASR server: {line:?}"))?
        .to_string();
    Ok(server)
}
