//! Real clients against the real server: the built-in page in headless Chromium, and OpenAI's
//! Python client. Each needs a program from outside the workspace; without it the test says so
//! and passes, unless the environment asks for it (F5_REQUIRE_CHROMIUM=1).

mod common;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

#[path = "../../f5-verify/tests/asr/harness.rs"]
mod asr;
use serde_json::{json, Value};

const TOKEN: &str = "page-token-7";

/// The Chromium to drive: $F5_CHROMIUM, else the first of the usual names on $PATH.
fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("F5_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
}

/// Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands
/// in on fd 3, answers out on fd 4, each a JSON text ended by NUL), which needs no websocket.
/// The page is watched in real time: under headless Chromium's virtual time (`--dump-dom
/// --virtual-time-budget`) an `<audio>` element loaded after the page's own load stalls, as
/// virtual time does not wait for the media pipeline.
struct Devtools {
    child: Child,
    commands: ChildStdin,
    answers: mpsc::Receiver<Value>,
    stderr: Arc<Mutex<String>>,
    next_id: u64,
}

impl Devtools {
    fn launch(chromium: &Path, profile: &Path, url: &str) -> Devtools {
        // The shell hands the child's stdin and stdout to Chromium as fds 3 and 4.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$@\" 3<&0 4>&1 0</dev/null 1>&2")
            .arg("sh")
            .arg(chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--mute-audio", "--no-first-run", "--remote-debugging-pipe"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium.display()));
        let commands = child.stdin.take().expect("stdin");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut err = child.stderr.take().expect("stderr");
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || loop {
            let mut message = Vec::new();
            match out.read_until(0, &mut message) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            message.pop();
            if let Ok(v) = serde_json::from_slice::<Value>(&message) {
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            let mut reader = std::io::BufReader::new(&mut err);
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if let Ok(mut all) = sink.lock() {
                    all.push_str(&line);
                }
                line.clear();
            }
        });
        Devtools { child, commands, answers, stderr, next_id: 1 }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Sends one command (to the browser, or to a page's session) and waits for its answer.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut command = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            command["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&command).expect("json");
        bytes.push(0);
        if let Err(e) = self.commands.write_all(&bytes).and_then(|_| self.commands.flush()) {
            panic!("Chromium stopped reading commands ({e}); stderr:\n{}", self.stderr());
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = match self.answers.recv_timeout(left) {
                Ok(a) => a,
                Err(e) => panic!("no answer to {method} ({e}); stderr:\n{}", self.stderr()),
            };
            // Anything else is an event.
            if answer["id"] == json!(id) {
                if let Some(error) = answer.get("error") {
                    panic!("{method} failed: {error}");
                }
                return answer["result"].clone();
            }
        }
    }

    fn close(mut self) {
        let _ = self.call(None, "Browser.close", json!({}));
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Devtools {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Opens `url` and waits until the page's `#status` leaves the idle and speaking states;
/// returns its `data-state`, `data-duration` and text.
fn page_outcome(chromium: &Path, url: &str) -> (String, f64, String) {
    let (state, duration, text, _) = page_outcome_with_token(chromium, url, None);
    (state, duration, text)
}

/// [`page_outcome`]; when the page asks for a token (`data-state` token) and `token` is given,
/// types it into the page's token box and submits it, as a person would, and waits on. Also
/// returns the token the page then keeps in the browser's storage (`None` when it never asked).
fn page_outcome_with_token(chromium: &Path, url: &str, token: Option<&str>) -> (String, f64, String, Option<String>) {
    // One profile per browser: the page tests run at the same time in one process.
    static BROWSERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BROWSERS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let profile = std::env::temp_dir().join(format!("f5-chromium-profile-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    let mut browser = Devtools::launch(chromium, &profile, url);
    let deadline = Instant::now() + Duration::from_secs(120);
    let target = loop {
        let targets = browser.call(None, "Target.getTargets", json!({}));
        let page = targets["targetInfos"].as_array().into_iter().flatten().find(|t| t["type"] == "page");
        if let Some(page) = page {
            break page["targetId"].clone();
        }
        assert!(Instant::now() < deadline, "Chromium never opened the page; targets: {targets}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let attached = browser.call(None, "Target.attachToTarget", json!({ "targetId": target, "flatten": true }));
    let session = attached["sessionId"].as_str().expect("a session id").to_string();
    let probe = "(() => { const s = document.getElementById('status'); \
                 return s ? JSON.stringify({ state: s.dataset.state, duration: s.dataset.duration, text: s.textContent }) : '{}'; })()";
    let mut asked: Option<String> = None;
    let outcome = loop {
        let result = browser.call(Some(&session), "Runtime.evaluate", json!({ "expression": probe, "returnByValue": true }));
        let status: Value = result["result"]["value"].as_str().and_then(|v| serde_json::from_str(v).ok()).unwrap_or(Value::Null);
        let state = status["state"].as_str().unwrap_or_default().to_string();
        if let (Some(token), "token", None) = (token, state.as_str(), &asked) {
            let enter = format!(
                "(() => {{ const box = document.getElementById('token'); box.value = {}; \
                 document.getElementById('token-button').click(); return true; }})()",
                serde_json::to_string(token).expect("json")
            );
            browser.call(Some(&session), "Runtime.evaluate", json!({ "expression": enter, "returnByValue": true }));
            asked = Some(String::new());
            continue;
        }
        // After the token is submitted the page still says "token" until its next listing.
        let token_submitted = state == "token" && asked.is_some();
        if !matches!(state.as_str(), "" | "idle" | "speaking") && !token_submitted {
            let duration = status["duration"].as_str().and_then(|d| d.parse().ok()).unwrap_or(0.0);
            break (state, duration, status["text"].as_str().unwrap_or_default().to_string());
        }
        assert!(Instant::now() < deadline, "the page is still {status} after two minutes; stderr:\n{}", browser.stderr());
        std::thread::sleep(Duration::from_millis(200));
    };
    if asked.is_some() {
        let stored = browser.call(
            Some(&session),
            "Runtime.evaluate",
            json!({ "expression": "localStorage.getItem('f5-token')", "returnByValue": true }),
        );
        asked = stored["result"]["value"].as_str().map(str::to_string);
    }
    browser.close();
    let _ = std::fs::remove_dir_all(&profile);
    (outcome.0, outcome.1, outcome.2, asked)
}

/// The page, opened by a link that carries the token, a voice and a text and asks it to speak:
/// it lists the voices, synthesises, and its `<audio>` element loads the wav and can play it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_speaks_in_headless_chromium() {
    let Some(chromium) = find_chromium() else {
        let msg = "no Chromium (set F5_CHROMIUM, or install chromium): the page test did not run";
        if std::env::var("F5_REQUIRE_CHROMIUM").as_deref() == Ok("1") {
            panic!("{msg}, and F5_REQUIRE_CHROMIUM=1 requires it");
        }
        eprintln!("SKIPPED: {msg}");
        return;
    };
    let s = start_with(|c| c.token = Some(TOKEN.into()), false).await;
    let c = client();
    // What the page should end up holding: the same request made directly.
    let r = c.post(s.url("/tts")).bearer_auth(TOKEN).json(&tts_body("Hello there.", 3)).send().await.expect("tts");
    assert_eq!(r.status(), 200);
    let expected_seconds = wav_samples(&r.bytes().await.expect("wav")) as f64 / 24_000.0;

    let url = s.url(&format!("/?token={TOKEN}&voice={VOICE}&text=Hello%20there.&nfe=4&seed=3&speak=1"));
    let (state, duration, text) = tokio::task::spawn_blocking(move || page_outcome(&chromium, &url)).await.expect("join");
    assert_eq!(state, "ready", "the page ended in {state:?}: {text}");
    // Chromium's wav demuxer reports the duration in whole microseconds.
    assert!((duration - expected_seconds).abs() < 1e-3, "the <audio> element holds {duration} s, the answer is {expected_seconds} s");
    // With a token set, /health says more than alive/ready only to a caller who has it.
    let h: Value = c.get(s.url("/health")).bearer_auth(TOKEN).send().await.expect("health").json().await.expect("health json");
    assert_eq!(h["jobs_done"], 2, "the page's request reached the model: {h}");
    s.shutdown().await;
}

/// With a token set, a browser opening the page without it gets the page, which asks for the
/// token; entered, it is kept in the browser and sent as a bearer header, and the page speaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_asks_for_the_token_in_headless_chromium() {
    let Some(chromium) = find_chromium() else {
        let msg = "no Chromium (set F5_CHROMIUM, or install chromium): the token page test did not run";
        if std::env::var("F5_REQUIRE_CHROMIUM").as_deref() == Ok("1") {
            panic!("{msg}, and F5_REQUIRE_CHROMIUM=1 requires it");
        }
        eprintln!("SKIPPED: {msg}");
        return;
    };
    let s = start_with(|c| c.token = Some(TOKEN.into()), false).await;
    let c = client();
    let page = c.get(s.url("/")).send().await.expect("page");
    assert_eq!(page.status(), 200, "the page opens without the token");
    assert!(page.text().await.expect("html").contains("id=\"token-form\""));
    let url = s.url(&format!("/?voice={VOICE}&text=Hello%20there.&nfe=4&seed=3&speak=1"));
    let (state, duration, text, stored) =
        tokio::task::spawn_blocking(move || page_outcome_with_token(&chromium, &url, Some(TOKEN))).await.expect("join");
    assert_eq!(stored.as_deref(), Some(TOKEN), "the page asked for the token and keeps it");
    assert_eq!(state, "ready", "the page ended in {state:?}: {text}");
    assert!(duration > 0.0);
    let h: Value = c.get(s.url("/health")).bearer_auth(TOKEN).send().await.expect("health").json().await.expect("health json");
    assert_eq!(h["jobs_done"], 1, "the page's request reached the model with the token: {h}");
    s.shutdown().await;
}

/// The page with a Kokoro model: a link picks the model, a mix of its named voices and mp3, the
/// page sends no F5-only option, and the `<audio>` element plays what the same request gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_speaks_a_kokoro_mix_in_headless_chromium() {
    let Some(chromium) = find_chromium() else {
        let msg = "no Chromium (set F5_CHROMIUM, or install chromium): the Kokoro page test did not run";
        if std::env::var("F5_REQUIRE_CHROMIUM").as_deref() == Ok("1") {
            panic!("{msg}, and F5_REQUIRE_CHROMIUM=1 requires it");
        }
        eprintln!("SKIPPED: {msg}");
        return;
    };
    let s = start_with(common::with_kokoro, false).await;
    let c = client();
    let direct = json!({ "model": common::KOKORO, "voice": "af_heart(2)+am_mirror", "text": "Hello there.", "seed": 3 });
    let r = c.post(s.url("/tts")).json(&direct).send().await.expect("tts");
    assert_eq!(r.status(), 200);
    let expected_seconds = wav_samples(&r.bytes().await.expect("wav")) as f64 / 24_000.0;

    // As mp3: the browser plays the compressed answer (its length within the codec's delay and
    // one frame: 1057 + 576 samples).
    let url = s.url(&format!("/?model={}&mix=af_heart(2)%2Bam_mirror&text=Hello%20there.&seed=3&format=mp3&speak=1", common::KOKORO));
    let (state, duration, text) = tokio::task::spawn_blocking(move || page_outcome(&chromium, &url)).await.expect("join");
    assert_eq!(state, "ready", "the page ended in {state:?}: {text}");
    assert!(
        (duration - expected_seconds).abs() < (1057.0 + 576.0) / 24_000.0,
        "the <audio> element holds {duration} s, the answer is {expected_seconds} s"
    );
    assert!(text.contains("audio/mpeg"), "the page asked for mp3: {text}");
    let h: Value = c.get(s.url("/health")).send().await.expect("health").json().await.expect("health json");
    assert_eq!(h["jobs_done"], 2, "the page's request reached the model: {h}");
    assert_eq!(h["model"], common::KOKORO, "{h}");
    s.shutdown().await;
}

/// The request OpenAI's Python client (openai 3.57.0) sends for
/// `client.audio.speech.create(model="tts-1", voice="birch", input="Hello there.",
/// response_format="wav")`, header for header and byte for byte, as captured from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_openai_python_sends_gets_a_wav() {
    let s = start_with(|c| c.token = Some(TOKEN.into()), false).await;
    let c = client();
    let body = format!(r#"{{"model":"tts-1","input":"Hello there.","voice":"{VOICE}","response_format":"wav"}}"#);
    let request = c
        .post(s.url("/v1/audio/speech"))
        .header("Accept-Encoding", "gzip, deflate")
        .header("Connection", "keep-alive")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("accept", "application/octet-stream")
        .header("content-type", "application/json")
        .header("user-agent", "OpenAI/Python 3.57.0")
        .header("x-stainless-lang", "python")
        .header("x-stainless-package-version", "3.57.0")
        .header("x-stainless-os", "Linux")
        .header("x-stainless-arch", "x64")
        .header("x-stainless-runtime", "CPython")
        .header("x-stainless-runtime-version", "3.11.7")
        .header("x-stainless-async", "false")
        .header("x-stainless-retry-count", "0")
        .header("x-stainless-read-timeout", "600");
    let r = request.body(body).send().await.expect("speech");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "audio/wav");
    assert!(wav_samples(&r.bytes().await.expect("wav")) > 0);
    s.shutdown().await;
}

/// OpenAI's own Python client, pointed at the server with the token as its API key, gets a
/// 24 kHz wav. Runs when F5_OPENAI_PYTHON names a Python that has the `openai` package.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_client_gets_a_wav() {
    let Some(python) = std::env::var_os("F5_OPENAI_PYTHON").filter(|p| !p.is_empty()) else {
        eprintln!("SKIPPED: F5_OPENAI_PYTHON is not set (a Python with `pip install openai`): the OpenAI client test did not run");
        return;
    };
    let s = start_with(|c| c.token = Some(TOKEN.into()), false).await;
    let out = std::env::temp_dir().join(format!("f5-openai-client-{}.wav", std::process::id()));
    let script = r#"
import sys, openai
base_url, api_key, voice, out = sys.argv[1:5]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)
speech = client.audio.speech.create(model="tts-1", voice=voice, input="Hello there.", response_format="wav")
open(out, "wb").write(speech.content)
try:
    client.audio.speech.create(model="tts-1", voice=voice, input="Hi.", response_format="aac")
    print("no error for aac")
except openai.BadRequestError as e:
    print("refused:", e.message)
print("openai", openai.__version__)
"#;
    let mut cmd = Command::new(&python);
    cmd.arg("-c").arg(script).arg(s.url("/v1")).arg(TOKEN).arg(VOICE).arg(&out);
    let (status, stdout, stderr) = tokio::task::spawn_blocking(move || run_bounded(cmd, Duration::from_secs(180))).await.expect("join");
    assert!(status.success(), "the OpenAI client failed ({status}):\n{stdout}\n{stderr}");
    eprintln!("ran {}", stdout.trim());
    let wav = std::fs::read(&out).expect("the client wrote the answer");
    let _ = std::fs::remove_file(&out);
    // RIFF/WAVE, mono 16-bit 24 kHz, a data chunk that holds samples.
    assert!(wav_samples(&wav) > 0, "{stdout}");
    // A 400 reaches the client's user as the server's message (OpenAI's error shape).
    let refused = stdout.lines().find_map(|l| l.strip_prefix("refused: ")).unwrap_or_else(|| panic!("no BadRequestError: {stdout}"));
    assert!(refused.contains("aac") && refused.contains("mp3"), "the message, not just the status: {refused}");
    s.shutdown().await;
}

/// Runs `cmd` to its end, or kills it after `limit`; returns its status, stdout and stderr.
fn run_bounded(mut cmd: Command, limit: Duration) -> (std::process::ExitStatus, String, String) {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the program starts");
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} ran past {limit:?} and was stopped; stderr:\n{}", stderr.join().unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default())
}

/// OpenAI's Python client and the int8-derived Kokoro weights (`cargo xtask kokoro-int8`, in
/// `F5_KOKORO_INT8`): `with_streaming_response` on `/v1/audio/speech` for two voices and a mix,
/// five sentences each, heard by pocketsphinx (the server's listen-back check, `F5_ASR_PYTHON`)
/// with a mean WER ≤ 0.15 (these weights score ~0.08 on such sentences). Skips, saying why,
/// without the client, the weights or the recogniser (missing weights fail where
/// `F5_KOKORO_REQUIRE_INT8=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_client_hears_kokoro_speak() {
    let skip = |reason: &str| eprintln!("SKIPPED (OpenAI client with Kokoro): {reason}");
    let Some(python) = std::env::var_os("F5_OPENAI_PYTHON").filter(|p| !p.is_empty()) else {
        return skip("F5_OPENAI_PYTHON is not set (a Python with `pip install openai`)");
    };
    let Some(dir) = std::env::var_os("F5_KOKORO_INT8").map(PathBuf::from).filter(|d| d.join("kokoro-v1_0.pth").is_file()) else {
        let reason = "F5_KOKORO_INT8 does not name the folder `cargo xtask kokoro-int8` writes";
        assert!(std::env::var("F5_KOKORO_REQUIRE_INT8").as_deref() != Ok("1"), "F5_KOKORO_REQUIRE_INT8=1 but {reason}");
        return skip(reason);
    };
    let asr = match asr::start_asr_server(600) {
        Ok(a) => a,
        Err(reason) => return skip(&reason),
    };
    let files = f5_synth::ModelFiles::Kokoro { checkpoint: dir.clone(), voices: f5_synth::KokoroVoices::in_model_dir(&dir) };
    let address = asr.address.clone();
    let s = start_with(
        move |c| {
            c.model = files;
            c.model_id = Some("kokoro".into());
            c.transcriber = Some(address);
        },
        false,
    )
    .await;
    let script = r#"
import sys, openai
base_url, voice, text = sys.argv[1:4]
client = openai.OpenAI(base_url=base_url, api_key="sk-none", max_retries=0, timeout=300)
with client.audio.speech.with_streaming_response.create(model="tts-1", voice=voice, input=text, response_format="wav") as r:
    audio = r.read()
    print(r.headers.get("x-f5-wer"), len(audio), r.headers.get("x-f5-score"))
"#;
    let text = "The sun was shining brightly this morning. We walked to the station together. \
                My brother bought a new red bicycle. Please close the window before you leave. \
                They will arrive at the airport tomorrow.";
    let mut wers = Vec::new();
    for voice in ["am_adam", "af_heart", "af_bella(2)+am_adam"] {
        let mut cmd = Command::new(&python);
        cmd.arg("-c").arg(script).arg(s.url("/v1")).arg(voice).arg(text);
        let (status, stdout, stderr) = tokio::task::spawn_blocking(move || run_bounded(cmd, Duration::from_secs(300))).await.expect("join");
        assert!(status.success(), "the OpenAI client failed ({status}):\n{stdout}\n{stderr}");
        eprintln!("{voice}: {}", stdout.trim());
        let mut fields = stdout.split_whitespace();
        let wer: f64 = fields.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("no x-f5-wer in {stdout}"));
        let bytes: usize = fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        assert!(bytes > 24_000 * 2, "seconds of audio, not {bytes} bytes");
        wers.push(wer);
    }
    let mean = wers.iter().sum::<f64>() / wers.len() as f64;
    assert!(mean <= 0.15, "mean WER {mean}: {wers:?}");
    s.shutdown().await;
}
