//! `cargo xtask bench kokoro-stream`: time to first audio of Kokoro-82M through the path a user
//! takes, `f5 serve`'s streamed `POST /tts` over HTTP. One server process loads the model
//! (default the int8-derived weights, `target/kokoro-int8`) and is warmed with a short request;
//! then each run sends the same five-sentence English text (f5's own front end reads it: no
//! phonemes are given) and times, from the request's first byte: the first audio bytes, every
//! later block, and the end of the answer. From the block times it also works out how long a
//! player that starts at the first audio and plays in real time would have to pause waiting
//! for the next block (0 when the synthesis keeps ahead of playback).
//!
//! The client speaks plain HTTP/1.1 over `TcpStream` and decodes the chunked body itself, so each
//! block's arrival is timed as it comes off the socket (as in `bench_serve`, no async runtime).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::machine;

/// Five sentences, about 20 s of speech: one chunk of the reference chunking (under 510 phonemes),
/// so without the first-sentence rule its first audio would wait for the whole forward.
const TEXT: &str = "The old lighthouse stood at the edge of the cliff. Every night its lamp swept across the water, \
                    guiding the fishing boats home. The keeper climbed the stairs at dusk and wound the clockwork by hand. \
                    In winter the storms were so loud that he could not hear himself think. Still, he never missed a night.";
const WARM_UP_TEXT: &str = "Hello there, this warms the model up.";
const VOICE: &str = "af_heart";
const SAMPLE_RATE: f64 = 24_000.0;
/// `response_format: pcm`: 16-bit little-endian mono samples, no header.
const BYTES_PER_SAMPLE: usize = 2;

struct Opts {
    threads: usize,
    runs: usize,
    model_dir: Option<PathBuf>,
    write: bool,
    /// The server's `--precision` (f32, bf16 or int8).
    precision: String,
}

/// One streamed answer: when each block of audio arrived (seconds from the request) and its size.
struct Answer {
    blocks: Vec<(f64, usize)>,
    total: f64,
}

impl Answer {
    fn first_audio(&self) -> f64 {
        self.blocks.first().map_or(f64::NAN, |b| b.0)
    }

    fn audio_seconds(&self) -> f64 {
        self.blocks.iter().map(|b| b.1).sum::<usize>() as f64 / BYTES_PER_SAMPLE as f64 / SAMPLE_RATE
    }

    /// Total pause of a real-time player that starts with the first block: each block is due
    /// when the audio before it has played out; a block arriving later stalls playback.
    fn playback_stall(&self) -> f64 {
        let Some(&(start, _)) = self.blocks.first() else { return 0.0 };
        let (mut clock, mut played, mut stall) = (start, 0.0, 0.0);
        for &(arrived, bytes) in &self.blocks {
            let due = clock + played;
            if arrived > due {
                stall += arrived - due;
                clock += arrived - due;
            }
            played += bytes as f64 / BYTES_PER_SAMPLE as f64 / SAMPLE_RATE;
        }
        stall
    }
}

pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut o = Opts { threads: 2, runs: 5, model_dir: None, write: true, precision: "f32".into() };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| it.next().with_context(|| format!("{what} needs a value"));
        match a.as_str() {
            "--threads" => o.threads = value("--threads")?.parse().context("--threads")?,
            "--runs" => o.runs = value("--runs")?.parse().context("--runs")?,
            "--model" => o.model_dir = Some(PathBuf::from(value("--model")?)),
            "--no-write" => o.write = false,
            "--precision" => o.precision = value("--precision")?.clone(),
            other => bail!(
                "bench kokoro-stream: unknown option {other:?} (--threads N, --runs N, --precision f32|bf16|int8, --model DIR, --no-write)"
            ),
        }
    }
    if o.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if !matches!(o.precision.as_str(), "f32" | "bf16" | "int8") {
        bail!("--precision {:?}: use f32, bf16 or int8", o.precision);
    }
    let model_dir = o.model_dir.clone().unwrap_or_else(|| root.join("target/kokoro-int8"));
    for need in ["config.json", "kokoro-v1_0.pth"] {
        if !model_dir.join(need).is_file() {
            bail!("{} has no {need}: run `cargo xtask kokoro-int8` or pass --model DIR", model_dir.display());
        }
    }
    eprintln!("building the f5 binary (release)…");
    let status = Command::new(env!("CARGO")).current_dir(root).args(["build", "--release", "-q", "-p", "f5-cli"]).status()?;
    if !status.success() {
        bail!("cargo build --release -p f5-cli failed");
    }
    let f5 = root.join("target/release/f5");
    let scratch = root.join("target/bench-kokoro-stream");
    std::fs::create_dir_all(&scratch)?;

    let busy = machine::wait_idle(0.10, Duration::from_secs(60));
    let load_before = load_average();
    let started = Instant::now();
    let server = Server::start(root, &f5, &model_dir, &scratch, o.threads, &o.precision)?;
    let listening = started.elapsed().as_secs_f64();
    let warm = request(server.addr, WARM_UP_TEXT).context("the warm-up request")?;
    eprintln!("server listening after {listening:.2} s; warm-up answered in {:.2} s", warm.total);
    let mut answers = Vec::new();
    for i in 0..o.runs {
        let a = request(server.addr, TEXT).with_context(|| format!("run {}", i + 1))?;
        eprintln!(
            "run {} of {}: first audio {:.3} s, whole answer {:.3} s, {:.2} s of audio in {} blocks, playback stall {:.2} s",
            i + 1,
            o.runs,
            a.first_audio(),
            a.total,
            a.audio_seconds(),
            a.blocks.len(),
            a.playback_stall()
        );
        answers.push(a);
    }
    drop(server);
    let load_after = load_average();

    let median = |f: &dyn Fn(&Answer) -> f64| {
        let mut v: Vec<f64> = answers.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (first, total, audio, stall) =
        (median(&|a| a.first_audio()), median(&|a| a.total), median(&|a| a.audio_seconds()), median(&|a| a.playback_stall()));
    let mut md = String::new();
    writeln!(md, "Machine: {}.", machine::describe())?;
    writeln!(
        md,
        "Command: `cargo xtask bench kokoro-stream --threads {} --runs {} --precision {}` (one `f5 serve` process, model loaded and warmed once; streamed `POST /tts`, `response_format: pcm`, over HTTP on loopback; median of {} runs; machine {:.0}% busy before, load average {} before and {} after). Weights: `{}`, voice {VOICE}, speed 1, seed 0.",
        o.threads,
        o.runs,
        o.precision,
        o.runs,
        busy * 100.0,
        load_before,
        load_after,
        model_dir.file_name().and_then(|n| n.to_str()).unwrap_or("?"),
    )?;
    writeln!(md)?;
    writeln!(md, "Text ({} characters, five sentences, read by f5's own English front end): \"{TEXT}\"", TEXT.chars().count())?;
    writeln!(md)?;
    // The blocks of the median run (by first audio): when each arrived and how much audio it held.
    let mut by_first: Vec<&Answer> = answers.iter().collect();
    by_first.sort_by(|a, b| a.first_audio().total_cmp(&b.first_audio()));
    let blocks = by_first[by_first.len() / 2]
        .blocks
        .iter()
        .map(|&(at, bytes)| format!("{at:.2} s ({:.2} s)", bytes as f64 / BYTES_PER_SAMPLE as f64 / SAMPLE_RATE))
        .collect::<Vec<_>>()
        .join(", ");
    writeln!(md, "| first audio | whole answer | audio | RTF | blocks: arrival (audio) | real-time player's stall |")?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    writeln!(md, "| {first:.3} s | {total:.3} s | {audio:.2} s | {:.3} | {blocks} | {stall:.2} s |", total / audio)?;
    print!("{md}");
    if o.write {
        let path = root.join("docs/benchmarks.md");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let heading = "## Kokoro-82M, time to first audio (`cargo xtask bench kokoro-stream`)";
        if !text.contains(heading) {
            std::fs::write(
                &path,
                format!("{}\n\n{heading}\n\nA streamed request to a warm `f5 serve`: how soon the first audio arrives, and whether playback could keep going after it.\n", text.trim_end()),
            )?;
        }
        // f32 keeps the section name it always had; another precision gets its own beside it.
        let key = if o.precision == "f32" {
            format!("kokoro-stream-{}t", o.threads)
        } else {
            format!("kokoro-stream-{}t-{}", o.threads, o.precision)
        };
        crate::bench::write_section(&path, &key, &md)?;
    }
    Ok(())
}

/// The kernel's 1-, 5- and 15-minute load averages, as `uptime` prints them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(", "))
        .unwrap_or_else(|| "unknown".into())
}

/// One streamed `POST /tts` on a fresh connection, timed block by block.
fn request(addr: SocketAddr, text: &str) -> Result<Answer> {
    let body = serde_json::json!({ "voice": VOICE, "text": text, "stream": true, "response_format": "pcm", "seed": 0 }).to_string();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(600)))?;
    stream.set_nodelay(true)?;
    let sent = Instant::now();
    write!(
        stream,
        "POST /tts HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status: u16 = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).with_context(|| format!("bad status line {line:?}"))?;
    let mut chunked = false;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            chunked |= k.trim().eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked");
        }
    }
    if status != 200 {
        let mut rest = String::new();
        let _ = reader.read_to_string(&mut rest);
        bail!("the server answered {status}: {}", rest.trim().chars().take(300).collect::<String>());
    }
    if !chunked {
        bail!("the streamed answer is not chunked: the server did not stream");
    }
    let mut blocks = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            bail!("the answer ended without its last chunk");
        }
        let size_text = line.trim_end().split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).with_context(|| format!("bad chunk size line {line:?}"))?;
        if size == 0 {
            break;
        }
        let mut data = vec![0u8; size + 2];
        reader.read_exact(&mut data)?;
        blocks.push((sent.elapsed().as_secs_f64(), size));
    }
    Ok(Answer { blocks, total: sent.elapsed().as_secs_f64() })
}

/// `f5 serve` on a free loopback port with the Kokoro folder as its one model.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(root: &Path, f5: &Path, model_dir: &Path, scratch: &Path, threads: usize, precision: &str) -> Result<Server> {
        let mut child = Command::new(f5)
            .current_dir(root)
            .arg("serve")
            .arg("--model")
            .arg(model_dir)
            .args(["--addr", "127.0.0.1:0", "--threads", &threads.to_string(), "--precision", precision])
            .arg("--voices")
            .arg(scratch.join("voices"))
            .env("F5_HOME", scratch)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start f5 serve")?;
        // The server prints the address it bound (port 0: the kernel's choice) on stderr.
        let stderr = child.stderr.take().context("server stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(rest) = line.split("serving on http://").nth(1) {
                        break rest.split_whitespace().next().unwrap_or_default().parse::<SocketAddr>().context("server address")?;
                    }
                    eprintln!("server: {line}");
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("f5 serve exited before listening");
                }
            }
        };
        // Keep draining its stderr so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        Ok(Server { child, addr })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::Answer;

    /// 0.5 s of audio per block (24 000 bytes of 16-bit samples).
    const HALF_SECOND: usize = 24_000;

    #[test]
    fn a_player_stalls_only_when_a_block_comes_after_the_audio_before_it_ran_out() {
        // Blocks at 1.0, 1.2 and 1.4 s: each arrives while the one before still plays.
        let ahead = Answer { blocks: vec![(1.0, HALF_SECOND), (1.2, HALF_SECOND), (1.4, HALF_SECOND)], total: 1.5 };
        assert_eq!(ahead.playback_stall(), 0.0);
        assert!((ahead.audio_seconds() - 1.5).abs() < 1e-12);
        // The second block comes 2 s after the first, whose audio lasted 0.5 s: a 1.5 s pause;
        // the third is then due at 3.5 s and arrives at 3.6 s: 0.1 s more.
        let behind = Answer { blocks: vec![(1.0, HALF_SECOND), (3.0, HALF_SECOND), (3.6, HALF_SECOND)], total: 3.7 };
        assert!((behind.playback_stall() - 1.6).abs() < 1e-9, "{}", behind.playback_stall());
        assert_eq!(behind.first_audio(), 1.0);
    }
}
