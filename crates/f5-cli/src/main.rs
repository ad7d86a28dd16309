//! `f5`: F5-TTS zero-shot text-to-speech. Every failure ends as one readable line on stderr and
//! a non-zero exit status.

mod batch_cmd;
mod chunks_cmd;
mod config;
mod limits;
mod memory;
mod model_args;
mod npy;
mod phonemes_cmd;
mod resolve;
mod synth_cmd;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "f5",
    version,
    about = "F5-TTS zero-shot text-to-speech: a short recording of a voice, its transcript and new text in; the new text spoken in that voice out."
)]
struct Cli {
    /// A settings file with the defaults of --model, --vocoder, --device, --precision and
    /// --voice (default $F5_HOME/config.toml, when it exists); flags override it.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Speak a text in the voice of a reference recording.
    Synth(Box<synth_cmd::SynthArgs>),
    /// Speak every line of a JSONL job file into a directory (ID.wav + ID.json per line),
    /// skipping lines already done; --shard I/N splits the file among N workers.
    Batch(Box<batch_cmd::BatchArgs>),
    /// Run the daemon: HTTP API (POST /tts, /dialogue, /v1/audio/speech; voices; health) and a
    /// web page at /, one model thread behind a job queue.
    Serve(Box<ServeArgs>),
    /// Manage the voice store.
    #[command(subcommand)]
    Voices(VoicesCommand),
    /// Turn a log-mel spectrogram into 24 kHz audio with Vocos.
    Vocode(VocodeArgs),
    /// Inspect model files.
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Print the model's token ids for each line of a text file, one line of ids per line, exactly
    /// as the reference front end (convert_char_to_pinyin + vocab) produces them.
    Tokens {
        /// The vocab.txt that belongs to the checkpoint.
        vocab: PathBuf,
        /// A UTF-8 text file ("-" for standard input).
        file: PathBuf,
        /// Print the tokens (pinyin/characters) instead of ids.
        #[arg(long)]
        show_tokens: bool,
    },
    /// Split a text into the chunks F5 synthesis generates one at a time, one per line (the
    /// reference's sentence split and UTF-8 byte budget). Give the voice options of `f5 synth`
    /// (--voice, or --ref and --ref-text) for exactly its chunks: the budget follows from the
    /// reference. Kokoro's chunks: `f5 phonemes`.
    Chunks(chunks_cmd::ChunksArgs),
    /// Print the phonemes Kokoro is given for a text, one chunk per line (`--json`: with tokens).
    Phonemes(phonemes_cmd::PhonemesArgs),
    /// Compute the log-mel the model is conditioned on for a reference recording: mono, RMS raised
    /// to 0.1 if quieter, resampled to 24 kHz, F5's mel. Written as float32 [frames, 100].
    Mel {
        /// A wav, mp3, flac or ogg file.
        input: PathBuf,
        /// Output .npy.
        #[arg(short, long)]
        output: PathBuf,
        /// Skip the RMS raise (the mel of the recording as it is).
        #[arg(long)]
        raw: bool,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// A model of either family: path, local id or hub reference (see `f5 synth --help`;
    /// default hexgrad/Kokoro-82M). Repeat to offer several, e.g. an F5 checkpoint and Kokoro:
    /// the first is the default, a request names another by the name given here (`"model": …`,
    /// listed by GET /models) or by its family (`f5`, `kokoro`), and the one model thread
    /// exchanges the weights when it does. `ID=NAME` gives it a short id of your choosing
    /// (`--model kokoro=hexgrad/Kokoro-82M`); ids never show a path of this machine.
    #[arg(long, short = 'm')]
    model: Vec<String>,
    /// The checkpoint's vocab.txt (default: beside it). With several models: once for all of
    /// them, or once per --model, in the same order.
    #[arg(long)]
    vocab: Vec<String>,
    /// The Vocos vocoder of the F5 models: path, local id or hub repo (default
    /// charactr/vocos-mel-24khz).
    #[arg(long)]
    vocoder: Option<String>,
    /// The settings file's vocoder: used for the F5 models when --vocoder is not given.
    #[arg(skip)]
    default_vocoder: Option<String>,
    /// Address to listen on. Anything but loopback exposes the API to the network: set --token.
    #[arg(long, default_value = "127.0.0.1:7860")]
    addr: std::net::SocketAddr,
    /// Voice store directory (default $F5_HOME/voices).
    #[arg(long)]
    voices: Option<PathBuf>,
    /// Require `Authorization: Bearer TOKEN` on every endpoint but /health; the page also
    /// takes it as `/?token=TOKEN`.
    #[arg(long, env = "F5_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Free the model when idle this many seconds; reload on the next request.
    #[arg(long = "unload-after")]
    unload_after: Option<u64>,
    /// Jobs that may wait for the model before requests get 503.
    #[arg(long = "queue", default_value_t = 16)]
    queue: usize,
    /// CPU threads for the model (default: all cores).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Where the model runs: cpu, cuda or cuda:N (needs a build with --features cuda).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Weight precision: f32; bf16 (bf16 weights, f32 accumulation; on a CPU without AVX-512 BF16
    /// the weights are widened to f32 per op); or int8 (CPU only, needs AVX-512 VNNI: bf16, and
    /// dense convolutions in int8 — Kokoro's decoder; with AMX, those under 256 channels stay on
    /// the faster bf16 tiles).
    #[arg(long, default_value = "f32")]
    precision: String,
    /// Listen back: a whisper.cpp-compatible transcriber (host:port); requests may then set
    /// retries/max_wer and answers carry X-F5-Score.
    #[arg(long)]
    transcriber: Option<String>,
    /// Language of the texts, for the transcriber and the word comparison.
    #[arg(long)]
    language: Option<String>,
    /// Most seconds of audio one request may make (estimated before it is queued; 413 above).
    #[arg(long = "max-audio-seconds", default_value_t = 300.0)]
    max_audio_seconds: f64,
    /// Most seconds of audio one piece of text between sentence breaks may make (413 above).
    #[arg(long = "max-chunk-seconds", default_value_t = 40.0)]
    max_chunk_seconds: f64,
    /// Seconds a job may take from being queued to its answer; past it, it stops (503).
    #[arg(long = "job-timeout", default_value_t = 600)]
    job_timeout: u64,
    /// Voice uploads decoded at once; more wait.
    #[arg(long = "max-uploads", default_value_t = 2)]
    max_uploads: usize,
    /// A web origin (scheme://host[:port]) besides the server's own that may POST and DELETE.
    /// Repeat for several.
    #[arg(long = "allow-origin")]
    allow_origin: Vec<String>,
    /// A host name clients may reach this server by besides localhost and IP addresses
    /// (checked when no --token is set, against DNS rebinding). Repeat for several.
    #[arg(long = "allowed-host")]
    allowed_host: Vec<String>,
    /// Seconds a client has to send a request's head.
    #[arg(long = "header-timeout", default_value_t = 10)]
    header_timeout: u64,
    /// Seconds a client has to send a request's body.
    #[arg(long = "body-timeout", default_value_t = 60)]
    body_timeout: u64,
    /// Seconds a kept-alive connection may sit idle.
    #[arg(long = "idle-timeout", default_value_t = 60)]
    idle_timeout: u64,
    /// Open connections at once.
    #[arg(long = "max-connections", default_value_t = 256)]
    max_connections: usize,
    /// One line per request on standard error: text, json, or off.
    #[arg(long = "log-format", default_value = "text")]
    log_format: String,
    /// After SIGTERM or Ctrl-C, seconds the accepted requests (running and queued) have to
    /// finish; those still waiting then are answered 503 and f5 exits 0 (at most 2 s later).
    /// Default: wait for all of them. Set the orchestrator's grace period a few seconds above.
    #[arg(long = "drain-timeout")]
    drain_timeout: Option<u64>,
}

#[derive(clap::Args)]
struct VocodeArgs {
    /// The Vocos vocoder: a directory or weights file, a local id, or a hub repo.
    #[arg(long)]
    vocoder: String,
    /// A log-mel .npy, float32 [frames, 100] (what `f5 mel` and `f5 synth --save-mel` write).
    input: PathBuf,
    /// Output .wav (16-bit PCM) or .npy (float32 samples at 24 kHz).
    #[arg(short, long)]
    output: PathBuf,
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Container, key prefix, architecture, parameter count and dtype of an F5 checkpoint or a
    /// Vocos vocoder.
    Inspect {
        /// A .safetensors/.pt/.bin file, a local id, or a hub reference (resolved from the cache,
        /// downloaded if absent).
        name: String,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Models on this machine: local ids ($F5_HOME/models) and files in the Hugging Face cache.
    List {
        /// Also list non-checkpoint files (configs, vocabularies).
        #[arg(long)]
        all: bool,
    },
    /// Download a hub reference (and the vocab.txt beside it; or a vocoder repo's weights and
    /// config) into the Hugging Face cache, checking what is already there.
    Pull {
        /// owner/repo/path/to/file[@revision], or owner/repo for a vocoder.
        reference: String,
    },
}

#[derive(Subcommand)]
enum VoicesCommand {
    /// Voices in the store ($F5_HOME/voices).
    List,
    /// Add a voice: a recording and exactly what it says.
    Add {
        /// A plain name: letters, digits, '_' and '-'.
        id: String,
        /// The recording (wav, mp3, flac, ogg).
        audio: PathBuf,
        /// Its transcript.
        #[arg(long)]
        transcript: String,
        /// Replace an existing voice of that id.
        #[arg(long)]
        replace: bool,
    },
    /// Remove a voice.
    Remove { id: String },
}

/// Large buffers on cache lines, as the `f5` binary has them (the CPU kernels' vector loads
/// straddle two lines from the system allocator's 16-byte alignment).
#[global_allocator]
static ALLOCATOR: f5_gpukit::LineAligned = f5_gpukit::LineAligned;

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match config::Config::load(cli.config.as_deref()).and_then(|settings| run(settings.apply(cli, &matches))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("f5: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by ": ", each said once: an error that prints its source in
/// its own message and also returns it as `source()` (common with `#[error("…: {0}")]` over
/// I/O errors) would otherwise print the cause twice.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let said = parts.last().is_some_and(|last| *last == text || last.ends_with(&format!(": {text}")));
        if !said && !text.is_empty() {
            parts.push(text);
        }
    }
    parts.join(": ")
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Synth(args) => {
            memory::return_large_blocks_to_the_system();
            synth_cmd::run(*args)
        }
        Command::Batch(args) => batch_cmd::run(*args),
        Command::Models(ModelsCommand::Inspect { name, json }) => inspect(&name, json),
        Command::Models(ModelsCommand::List { all }) => models_list(all),
        Command::Models(ModelsCommand::Pull { reference }) => {
            for p in resolve::hub(false).pull(&reference)? {
                println!("{}", p.path.display());
            }
            Ok(())
        }
        Command::Voices(cmd) => voices(cmd),
        Command::Serve(a) => serve(*a),
        Command::Tokens { vocab, file, show_tokens } => tokens(&vocab, &file, show_tokens),
        Command::Chunks(a) => chunks_cmd::run(a),
        Command::Phonemes(a) => phonemes_cmd::run(a),
        Command::Mel { input, output, raw } => mel(&input, &output, raw),
        Command::Vocode(a) => vocode(&a),
    }
}

fn read_text(path: &Path) -> Result<String> {
    limits::read_text(path)
}

fn tokens(vocab: &Path, file: &Path, show_tokens: bool) -> Result<()> {
    limits::require_regular_file(vocab, "vocabulary")?;
    let vocab = f5_text::Vocab::load(vocab)?;
    let text = read_text(file)?;
    let mut out = String::new();
    for line in text.lines() {
        let toks = f5_text::to_tokens(line)?;
        if show_tokens {
            out.push_str(&serde_json::to_string(&toks)?);
        } else {
            let ids: Vec<String> = vocab.ids(&toks).iter().map(u32::to_string).collect();
            out.push_str(&ids.join(" "));
        }
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

fn mel(input: &Path, output: &Path, raw: bool) -> Result<()> {
    limits::require_regular_file(input, "recording")?;
    let audio = f5_audio::decode_file(input)?;
    let wave = if raw { f5_audio::resample_to_24k(&audio.to_mono(), audio.sample_rate)? } else { f5_audio::prepare_reference(&audio)?.0 };
    let mel = f5_audio::MelSpectrogram::new().log_mel(&wave)?;
    let frames = mel.len() / f5_audio::mel::N_MELS;
    npy::write_f32(output, &[frames as u64, f5_audio::mel::N_MELS as u64], &mel)?;
    eprintln!("{}: {frames} frames ({:.2} s at 24 kHz) → {}", input.display(), wave.len() as f64 / 24_000.0, output.display());
    Ok(())
}

fn inspect_kokoro(path: &Path, container: &str, k: &f5_kokoro::KokoroSummary, json: bool) -> Result<()> {
    if json {
        let j = serde_json::json!({
            "kind": "kokoro", "container": container, "layout": k.layout, "tensors": k.tensors, "params": k.params,
            "hidden_dim": k.hidden_dim, "albert_hidden": k.albert_hidden, "n_token": k.n_token, "style_dim": k.style_dim,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!("{}: Kokoro (StyleTTS2 + ISTFTNet), {container}, {} layout", path.display(), k.layout);
        println!(
            "  ALBERT hidden {} over {} tokens → text features {} → prosody and decoder conditioned on a {}-float voice style",
            k.albert_hidden,
            k.n_token,
            k.hidden_dim,
            2 * k.style_dim
        );
        println!("  {} tensors, {} parameters", k.tensors, k.params);
    }
    Ok(())
}

fn inspect_vocos(path: &Path, container: &str, v: &f5_vocos::VocosConfig, json: bool) -> Result<()> {
    let hop_from = match &v.hop_source {
        f5_vocos::HopSource::Yaml(p) => format!("config {}", p.display()),
        _ => "default (no config.yaml beside the weights)".into(),
    };
    if json {
        let j = serde_json::json!({
            "kind": "vocos", "container": container, "prefix": v.prefix, "mel_channels": v.mel_channels, "dim": v.dim,
            "intermediate_dim": v.intermediate, "layers": v.layers, "n_fft": v.n_fft, "hop": v.hop, "sample_rate": v.sample_rate,
            "params": v.params, "hop_from": hop_from,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!("{}: Vocos vocoder, {container}", path.display());
        println!(
            "  {} mel channels → dim {} × {} ConvNeXt layers (intermediate {}) → iSTFT n_fft {} hop {} at {} Hz",
            v.mel_channels, v.dim, v.layers, v.intermediate, v.n_fft, v.hop, v.sample_rate
        );
        println!("  hop from {hop_from}; {} parameters", v.params);
    }
    Ok(())
}

fn vocode(a: &VocodeArgs) -> Result<()> {
    limits::require_regular_file(&a.input, "mel file")?;
    let (shape, mel) = npy::read_f32(&a.input)?;
    let vocos = f5_vocos::Vocos::open(resolve::vocoder(&resolve::hub(false), &a.vocoder)?, f5_gpukit::CpuBackend::new())?;
    let channels = vocos.config().mel_channels as u64;
    let frames = match shape.as_slice() {
        [f, c] if *c == channels => *f as usize,
        [c, f] if *c == channels => bail!(
            "{}: shape {shape:?} looks like [channels, frames]; f5 reads mels as [frames, {channels}] (transpose it)",
            a.input.display()
        ),
        _ => bail!("{}: shape {shape:?}, expected [frames, {channels}]", a.input.display()),
    };
    let wave = vocos.decode(&mel, frames)?;
    match a.output.extension().and_then(|e| e.to_str()) {
        Some("npy") => npy::write_f32(&a.output, &[wave.len() as u64], &wave)?,
        Some("wav") => {
            let mut w: Vec<f64> = wave.iter().map(|&v| v as f64).collect();
            f5_audio::level::limit_peak_f64(&mut w, 1.0);
            f5_audio::output::write_wav_pcm16(&a.output, &w, 24_000)?;
        }
        _ => bail!("{}: the output must end in .wav or .npy", a.output.display()),
    }
    eprintln!("{}: {frames} frames → {:.2} s → {}", a.input.display(), wave.len() as f64 / 24_000.0, a.output.display());
    Ok(())
}

fn serve(a: ServeArgs) -> Result<()> {
    let device = f5_gpukit::DeviceChoice::parse(&a.device, &a.precision)?;
    let hub = std::sync::Arc::new(resolve::hub(false));
    let names: Vec<String> = if a.model.is_empty() { vec![resolve::DEFAULT_MODEL.to_string()] } else { a.model.clone() };
    let vocab_for = |i: usize| match a.vocab.len() {
        0 => Ok(None),
        1 => Ok(a.vocab.first().map(String::as_str)),
        n if n == names.len() => Ok(a.vocab.get(i).map(String::as_str)),
        n => Err(anyhow::anyhow!("{n} --vocab for {} --model: give one for all, or one per model", names.len())),
    };
    // `ID=NAME` gives a model the id requests use; otherwise the name itself is the id (a path
    // is never shown: the server then takes the directory name).
    let (ids, names): (Vec<Option<String>>, Vec<String>) = names
        .iter()
        .map(|n| match n.split_once('=') {
            Some((id, name)) if f5_hub::is_valid_id(id) && !name.is_empty() => (Some(id.to_string()), name.to_string()),
            _ => (Some(n.clone()), n.clone()),
        })
        .unzip();
    let mut files = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let vocoder = resolve::VocoderChoice { given: a.vocoder.as_deref(), default: a.default_vocoder.as_deref() };
        files.push(resolve::model_files_with(&hub, name, vocab_for(i)?, vocoder, resolve::Use::Server)?);
    }
    if a.vocoder.is_some() && !files.iter().any(|f| f.clones_from_recording()) {
        bail!("--vocoder applies to F5 models, and none was given");
    }
    let mut files = files.into_iter();
    let Some(first) = files.next() else { bail!("name a model with --model") };
    let more_models: Vec<f5_server::ModelEntry> = files
        .zip(ids.iter().skip(1))
        .map(|(f, id)| {
            let mut e = f5_server::ModelEntry::with_files(f);
            e.id = id.clone();
            e
        })
        .collect();
    let voices = match a.voices {
        Some(v) => v,
        None => f5_synth::store::f5_home().join("voices"),
    };
    let mut config = f5_server::ServerConfig::with_model(first, voices);
    config.model_id = ids.first().cloned().flatten();
    config.addr = a.addr;
    config.more_models = more_models;
    config.token = a.token.filter(|t| !t.is_empty());
    if config.token.is_none() && !a.addr.ip().is_loopback() {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "f5 serve: WARNING: listening on {} without --token: anyone who can reach this machine can use the API, add and delete voices. Set --token (or F5_TOKEN), or listen on 127.0.0.1.",
            a.addr
        );
    }
    config.unload_after = a.unload_after.map(std::time::Duration::from_secs);
    config.queue_capacity = a.queue;
    config.threads = limits::clamp_threads(a.threads);
    config.device = device;
    config.max_audio_seconds = a.max_audio_seconds;
    config.max_chunk_seconds = a.max_chunk_seconds;
    config.job_timeout = std::time::Duration::from_secs(a.job_timeout);
    config.max_concurrent_uploads = a.max_uploads;
    config.allowed_origins = a.allow_origin;
    config.allowed_hosts = a.allowed_host;
    config.header_timeout = std::time::Duration::from_secs(a.header_timeout);
    config.body_timeout = std::time::Duration::from_secs(a.body_timeout);
    config.idle_timeout = std::time::Duration::from_secs(a.idle_timeout);
    config.max_connections = a.max_connections;
    config.log_format = match a.log_format.as_str() {
        "text" => f5_server::LogFormat::Text,
        "json" => f5_server::LogFormat::Json,
        "off" => f5_server::LogFormat::Off,
        other => bail!("--log-format {other:?}: use text, json or off"),
    };
    config.drain_timeout = a.drain_timeout.map(std::time::Duration::from_secs);
    config.transcriber = a.transcriber;
    config.language = a.language;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    rt.block_on(async move {
        let server = f5_server::Server::bind(config).await?;
        // The daemon's lines never panic on a closed stderr (a supervisor that stopped reading).
        {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "f5 serving on http://{} (Ctrl-C to stop)", server.local_addr());
        }
        // Ctrl-C or SIGTERM (what an orchestrator sends): stop accepting, answer every request
        // already accepted (queued jobs included), then exit 0.
        server
            .run(async {
                #[cfg(unix)]
                {
                    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                        Ok(t) => t,
                        Err(_) => {
                            let _ = tokio::signal::ctrl_c().await;
                            return;
                        }
                    };
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                }
                #[cfg(not(unix))]
                let _ = tokio::signal::ctrl_c().await;
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "f5 serve: stopping: no new connections; finishing the requests already accepted");
            })
            .await?;
        Ok::<(), anyhow::Error>(())
    })
}

fn models_list(all: bool) -> Result<()> {
    let entries: Vec<_> = resolve::hub(true).list().into_iter().filter(|e| all || e.is_checkpoint()).collect();
    if entries.is_empty() {
        eprintln!("no models on this machine yet: `f5 models pull owner/repo/path` or pass --model a path");
    }
    for e in entries {
        let kind = match e.kind {
            f5_hub::ModelKind::Local => "local",
            f5_hub::ModelKind::Reference => "cached",
            f5_hub::ModelKind::Path => "path",
        };
        println!("{:<7} {:>10}  {}", kind, human_bytes(e.size), e.name);
    }
    Ok(())
}

fn human_bytes(n: u64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

fn voices(cmd: VoicesCommand) -> Result<()> {
    // Listing reads: a store that does not exist yet is empty, and is not created.
    let root = f5_synth::store::f5_home().join("voices");
    if matches!(cmd, VoicesCommand::List) && !root.is_dir() {
        eprintln!("no voices in {} yet: `f5 voices add ID recording.wav --transcript \"...\"`", root.display());
        return Ok(());
    }
    let store = f5_synth::VoiceStore::from_env()?;
    match cmd {
        VoicesCommand::List => {
            let all = store.list()?;
            if all.is_empty() {
                eprintln!("no voices in {} yet: `f5 voices add ID recording.wav --transcript \"...\"`", store.root().display());
            }
            for v in all {
                println!("{:<20} {}", v.id, v.transcript);
            }
        }
        VoicesCommand::Add { id, audio, transcript, replace } => {
            let bytes = f5_audio::decode::read_regular_file(&audio, f5_synth::store::MAX_AUDIO_BYTES as u64)?;
            let ext = audio.extension().and_then(|e| e.to_str()).unwrap_or("wav");
            // The store proves the voice usable (decodes, not silent, long enough) before storing it.
            let e = store.add(&id, &transcript, &bytes, ext, replace).with_context(|| format!("{}", audio.display()))?;
            eprintln!("added voice {} ({})", e.id, e.audio.display());
        }
        VoicesCommand::Remove { id } => {
            store.remove(&id)?;
            eprintln!("removed voice {id}");
        }
    }
    Ok(())
}

/// The weights file in a model directory, as `f5 synth` finds it for either family: Kokoro's
/// release checkpoint, else the one `.safetensors` (which wins over `.pt` files), else the one
/// `.pt`, else a vocoder's `pytorch_model.bin`.
fn checkpoint_in(dir: &Path) -> Result<PathBuf> {
    let kokoro = dir.join(f5_hub::KOKORO_CHECKPOINT);
    if kokoro.is_file() {
        return Ok(kokoro);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let with = |ext: &str| files.iter().filter(|p| p.extension().is_some_and(|e| e == ext)).cloned().collect::<Vec<_>>();
    for ext in ["safetensors", "pt"] {
        match with(ext).as_slice() {
            [one] => return Ok(one.clone()),
            [] => {}
            many => {
                let names: Vec<String> = many.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
                bail!("several checkpoints in {} ({}): name the file", dir.display(), names.join(", "))
            }
        }
    }
    let bin = dir.join("pytorch_model.bin");
    if bin.is_file() {
        return Ok(bin);
    }
    bail!("no checkpoint (kokoro-v1_0.pth, *.safetensors, *.pt, pytorch_model.bin) in {}", dir.display())
}

fn inspect(name: &str, json: bool) -> Result<()> {
    let hub = resolve::hub(false);
    let local = hub.config().models_dir().join(name);
    let path = if Path::new(name).is_dir() {
        checkpoint_in(Path::new(name))?
    } else if Path::new(name).exists() {
        PathBuf::from(name)
    } else if f5_hub::is_valid_id(name) && local.is_dir() {
        checkpoint_in(&local)?
    } else {
        match hub.resolve(name, None) {
            Ok(f5_hub::Resolved::F5(r)) => r.checkpoint,
            Ok(f5_hub::Resolved::Kokoro(k)) if k.checkpoint.is_dir() => checkpoint_in(&k.checkpoint)?,
            Ok(f5_hub::Resolved::Kokoro(k)) => k.checkpoint,
            Err(model_error) => match hub.resolve_vocoder(name) {
                Ok(v) => v.weights,
                Err(_) => return Err(model_error.into()),
            },
        }
    };
    let path = path.as_path();
    limits::require_regular_file(path, "checkpoint")?;
    let ckpt = f5_torchpt::Checkpoint::open(path)?;
    let container = match ckpt.format() {
        f5_torchpt::Format::Safetensors => "safetensors",
        f5_torchpt::Format::TorchZip => "pytorch",
    };
    if let Some(k) = f5_kokoro::inspect(&ckpt) {
        return inspect_kokoro(path, container, &k, json);
    }
    let c = match f5_dit::F5Config::infer(&ckpt, path, &f5_dit::Overrides::default()) {
        Ok(c) => c,
        Err(e) => {
            let yaml = path.parent().map(|d| d.join("config.yaml")).filter(|p| p.is_file());
            if let Ok(v) = f5_vocos::VocosConfig::infer(&ckpt, yaml.as_deref()) {
                return inspect_vocos(path, container, &v, json);
            }
            bail!("{} is neither an F5-TTS, a Kokoro nor a Vocos checkpoint this version can read: {e}", path.display())
        }
    };
    let dtype = ckpt
        .meta(&format!("{}time_embed.time_mlp.0.weight", c.prefix))
        .map(|m| format!("{:?}", m.dtype()).to_lowercase())
        .unwrap_or_else(|_| "unknown".into());
    let variant = c.variant().map_or("mixed", |v| v.name());
    let source = match &c.source {
        f5_dit::TraitSource::Yaml(p) => format!("config {}", p.display()),
        f5_dit::TraitSource::Overrides => "explicit options".into(),
        f5_dit::TraitSource::Default => "defaults (no matching training config beside the file)".into(),
    };
    if json {
        let v = serde_json::json!({
            "kind": "f5",
            "container": container,
            "prefix": c.prefix,
            "dim": c.dim,
            "depth": c.depth,
            "heads": c.heads,
            "dim_head": c.dim_head,
            "ff_mult": c.ff_mult(),
            "text_dim": c.text_dim,
            "text_vocab": c.text_rows,
            "conv_layers": c.conv_layers,
            "mel_dim": c.mel_dim,
            "variant": variant,
            "text_mask_padding": c.text_mask_padding,
            "pe_attn_head": c.pe_attn_head,
            "params": c.params,
            "dtype": dtype,
            "traits_from": source,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{}: F5-TTS DiT, {container}, prefix `{}`", path.display(), c.prefix);
        println!(
            "  dim {} × depth {}, {} heads of {}, ff ×{}, text dim {} ({} embedding rows), {} ConvNeXt blocks, {} mel channels",
            c.dim,
            c.depth,
            c.heads,
            c.dim_head,
            c.ff_mult(),
            c.text_dim,
            c.text_rows,
            c.conv_layers,
            c.mel_dim
        );
        println!("  variant {variant} (heads and traits from {source})");
        println!("  {} parameters, {dtype}", c.params);
    }
    Ok(())
}
