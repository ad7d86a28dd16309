//! `f5 synth`: the main job.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use f5_gpukit::CpuBackend;
use f5_synth::{Progress, SynthOptions, Synthesizer, Voice};

use crate::{npy, resolve};

#[derive(Args)]
pub struct SynthArgs {
    /// The F5-TTS checkpoint: a .safetensors/.pt file or a directory holding one; a local model
    /// id ($F5_HOME/models/ID); or a hub reference owner/repo/path/to/file[@revision], downloaded
    /// once into the Hugging Face cache (e.g. SWivid/F5-TTS/F5TTS_v1_Base/model_1250000.safetensors).
    #[arg(long, short = 'm')]
    pub model: String,
    /// The vocab.txt of the checkpoint (default: vocab.txt beside it, in the same directory or repo).
    #[arg(long)]
    pub vocab: Option<String>,
    /// The Vocos vocoder: a directory or weights file, a local id, or a hub repo such as
    /// charactr/vocos-mel-24khz.
    #[arg(long)]
    pub vocoder: String,
    /// A voice: an id in the voice store (`f5 voices list`), or a directory with reference.wav
    /// (or .mp3/.flac/.ogg) and config.json holding {"transcript": "..."}.
    #[arg(long, conflicts_with_all = ["reference", "reference_text"])]
    pub voice: Option<String>,
    /// The reference recording (wav, mp3, flac, ogg); 3–12 s of clean speech works best. Longer
    /// recordings are clipped at a pause, as the reference implementation does.
    #[arg(long = "ref", requires = "reference_text")]
    pub reference: Option<PathBuf>,
    /// Exactly what is said in the reference recording.
    #[arg(long = "ref-text")]
    pub reference_text: Option<String>,
    /// The text to speak.
    #[arg(long, short = 't', conflicts_with = "file")]
    pub text: Option<String>,
    /// A UTF-8 file with the text to speak ("-" for standard input).
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// Output: .wav (16-bit PCM; --float for 32-bit float) or .npy (float32 samples, 24 kHz).
    #[arg(long, short = 'o')]
    pub output: PathBuf,
    /// Write 32-bit float wav samples instead of 16-bit.
    #[arg(long)]
    pub float: bool,
    /// ODE steps: fewer is faster, 32 is the reference default (16 and 8 use pruned schedules).
    #[arg(long, default_value_t = 32)]
    pub nfe: usize,
    /// Classifier-free guidance strength.
    #[arg(long, default_value_t = 2.0)]
    pub cfg: f32,
    /// Sway sampling coefficient (spends more steps early, where the flow curves); 0 disables.
    #[arg(long, default_value_t = -1.0, allow_hyphen_values = true)]
    pub sway: f32,
    /// Speaking rate: > 1 faster, < 1 slower (scales the duration estimate).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Noise seed, for a reproducible result (printed when not given).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Cross-fade between chunks of a long text, seconds.
    #[arg(long = "cross-fade", default_value_t = 0.15)]
    pub cross_fade: f64,
    /// Total duration in seconds (reference included) instead of the estimate.
    #[arg(long = "fix-duration")]
    pub fix_duration: Option<f64>,
    /// Write the generated mel [frames, 100] (all chunks) to this .npy.
    #[arg(long = "save-mel")]
    pub save_mel: Option<PathBuf>,
    /// Write a JSON report: options, chunks (text, frames, seconds), seed, timings.
    #[arg(long = "report-json")]
    pub report_json: Option<PathBuf>,
    /// Listen back: a whisper.cpp-compatible transcriber (host:port, POST /inference) that hears
    /// every chunk; a chunk with too many word errors is generated again with a new seed.
    #[arg(long)]
    pub transcriber: Option<String>,
    /// Language of the text for the transcriber and the word comparison (e.g. en, fi, zh).
    #[arg(long)]
    pub language: Option<String>,
    /// Listen back: how many times a misheard chunk may be regenerated.
    #[arg(long, default_value_t = 2)]
    pub retries: u32,
    /// Listen back: the highest word error rate (0–1) a chunk may have.
    #[arg(long = "max-wer", default_value_t = 0.3)]
    pub max_wer: f64,
    /// CPU threads (default: all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

fn load_voice(args: &SynthArgs) -> Result<Voice> {
    let (audio, transcript) = match (&args.voice, &args.reference, &args.reference_text) {
        (Some(name), _, _) => resolve::voice(name)?,
        (None, Some(wav), Some(t)) => (wav.clone(), t.clone()),
        _ => bail!("give a voice: --voice DIR, or --ref WAV with --ref-text \"what it says\""),
    };
    Ok(Voice::load(&audio, &transcript, f5_audio::level::TARGET_RMS)?)
}

pub fn run(args: SynthArgs) -> Result<()> {
    let text = match (&args.text, &args.file) {
        (Some(t), None) => t.clone(),
        (None, Some(f)) => crate::read_text(f)?,
        _ => bail!("give the text to speak with --text or --file"),
    };
    let ext = args.output.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    if !matches!(ext.as_deref(), Some("wav") | Some("npy")) {
        bail!("{}: the output must end in .wav or .npy", args.output.display());
    }
    let hub = resolve::hub(args.quiet);
    let (model_path, vocab_path) = resolve::model(&hub, &args.model, args.vocab.as_deref())?;
    let vocoder_path = resolve::vocoder(&hub, &args.vocoder)?;
    let started = Instant::now();
    let kit = CpuBackend::with_threads(args.threads)?;
    let mut synth = Synthesizer::open(&model_path, &vocab_path, &vocoder_path, kit, &f5_dit::Overrides::default())?;
    if let Some(addr) = &args.transcriber {
        let transcriber = f5_verify::Transcriber::new(addr, args.language.clone()).with_context(|| format!("transcriber {addr}"))?;
        let language = f5_verify::language_for(args.language.as_deref());
        synth = synth.with_listen_back(f5_synth::ListenBack { transcriber: Box::new(transcriber), language });
    }
    let voice = load_voice(&args)?;
    let load_seconds = started.elapsed().as_secs_f64();
    let opts = SynthOptions {
        nfe: args.nfe,
        cfg: args.cfg,
        sway: if args.sway == 0.0 { None } else { Some(args.sway) },
        speed: args.speed,
        seed: args.seed,
        cross_fade: args.cross_fade,
        fix_duration: args.fix_duration,
        retries: args.retries,
        max_wer: args.max_wer,
        ..SynthOptions::default()
    };
    if !args.quiet && args.transcriber.is_some() {
        eprintln!("{}", synth.gate_status(&opts));
    }
    let bar = if args.quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(0) };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} chunk {msg} [{bar:30}] {pos}/{len} steps, {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let synth_started = Instant::now();
    let mut chunk_count = 0;
    let mut extra_attempts = 0;
    let audio = synth.synthesize(&voice, &text, &opts, &mut |p| match p {
        Progress::Chunk { index, total, attempt, .. } => {
            chunk_count = total;
            if attempt == 0 {
                bar.set_length(((total + extra_attempts) * opts.nfe) as u64);
                bar.set_message(format!("{}/{total}", index + 1));
            } else {
                extra_attempts += 1;
                bar.set_length(((total + extra_attempts) * opts.nfe) as u64);
                bar.set_message(format!("{}/{total} (misheard, attempt {})", index + 1, attempt + 1));
            }
        }
        Progress::Step { .. } => bar.inc(1),
    })?;
    bar.finish_and_clear();
    let synth_seconds = synth_started.elapsed().as_secs_f64();

    let mut samples = audio.samples.clone();
    let peak = f5_audio::level::peak(&samples);
    let limited = ext.as_deref() == Some("wav") && !args.float && peak > 1.0;
    if limited {
        // 16-bit cannot hold it: scale down once instead of clipping.
        f5_audio::level::limit_peak(&mut samples, 1.0);
    }
    match ext.as_deref() {
        Some("npy") => npy::write_f32(&args.output, &[samples.len() as u64], &samples)?,
        _ => {
            let wide: Vec<f64> = samples.iter().map(|&v| v as f64).collect();
            let tmp = args.output.with_extension("wav.partial");
            if args.float {
                f5_audio::output::write_wav_f32(&tmp, &wide, f5_synth::SAMPLE_RATE)?;
            } else {
                f5_audio::output::write_wav_pcm16(&tmp, &wide, f5_synth::SAMPLE_RATE)?;
            }
            std::fs::rename(&tmp, &args.output).with_context(|| format!("cannot write {}", args.output.display()))?;
        }
    }
    if let Some(p) = &args.save_mel {
        npy::write_f32(p, &[(audio.mel.len() / 100) as u64, 100], &audio.mel)?;
    }
    let secs = audio.seconds();
    if let Some(p) = &args.report_json {
        write_report(p, &args, &opts, &audio, load_seconds, synth_seconds)?;
    }
    let score = if args.transcriber.is_none() {
        String::new()
    } else {
        match audio.score.wer() {
            Some(w) => format!(
                ", heard WER {:.1}% ({} of {} words; {} regenerated, {} unchecked)",
                w * 100.0,
                audio.score.errors,
                audio.score.words,
                audio.score.regenerated,
                audio.score.unchecked
            ),
            None => ", unchecked (the transcriber did not answer)".to_string(),
        }
    };
    eprintln!(
        "{}: {secs:.2} s of audio in {synth_seconds:.1} s (RTF {:.2}), {chunk_count} chunk{}, seed {}{}{score}",
        args.output.display(),
        synth_seconds / secs.max(1e-9),
        if chunk_count == 1 { "" } else { "s" },
        audio.seed,
        if limited { format!(", peak {peak:.2} scaled to 1.0") } else { String::new() }
    );
    Ok(())
}

fn write_report(
    path: &Path,
    args: &SynthArgs,
    opts: &SynthOptions,
    audio: &f5_synth::Audio,
    load_seconds: f64,
    synth_seconds: f64,
) -> Result<()> {
    let chunks: Vec<_> = audio
        .chunks
        .iter()
        .map(|c| {
            serde_json::json!({
                "text": c.text, "frames": c.frames, "generated_frames": c.generated_frames, "samples": c.samples, "seconds": c.seconds,
                "attempts": c.score.attempts, "checked": c.score.checked, "wer": c.score.wer, "errors": c.score.errors, "words": c.score.words,
                "heard": c.score.transcript, "problem": c.score.problem,
            })
        })
        .collect();
    let report = serde_json::json!({
        "model": args.model,
        "vocoder": args.vocoder,
        "options": {"nfe": opts.nfe, "cfg": opts.cfg, "sway": opts.sway, "speed": opts.speed, "cross_fade": opts.cross_fade, "fix_duration": opts.fix_duration},
        "seed": audio.seed,
        "audio_seconds": audio.seconds(),
        "load_seconds": load_seconds,
        "synth_seconds": synth_seconds,
        "chunks": chunks,
        "score": {"words": audio.score.words, "errors": audio.score.errors, "attempts": audio.score.attempts, "unchecked": audio.score.unchecked, "regenerated": audio.score.regenerated, "wer": audio.score.wer()},
    });
    std::fs::write(path, serde_json::to_string_pretty(&report)?).with_context(|| format!("cannot write {}", path.display()))
}
