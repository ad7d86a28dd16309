//! `f5 synth`: the main job.

mod spectrogram;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use f5_gpukit::{Backend, CpuBackend};
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
    /// The text to speak. `[name]` tags switch voices mid-text (store ids; `[main]` is the voice
    /// given here), as the official CLI's multi-voice mode does.
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
    /// Remove pauses of a second or more from the result (the reference's remove_silence).
    #[arg(long = "remove-silence")]
    pub remove_silence: bool,
    /// Loudness the reference is raised to when quieter (the result is scaled back by the same
    /// factor, so you hear your own loudness).
    #[arg(long = "target-rms", default_value_t = 0.1)]
    pub target_rms: f32,
    /// Write the generated mel [frames, 100] (all chunks) to this .npy.
    #[arg(long = "save-mel")]
    pub save_mel: Option<PathBuf>,
    /// Write a picture of the generated log-mel (all chunks) to this .png: time left to right,
    /// one pixel per frame; low frequencies at the bottom. The audio is written first: if the
    /// image cannot be, the audio stays and f5 exits with an error.
    #[arg(long)]
    pub spectrogram: Option<PathBuf>,
    /// This project's rule for short lines and one-word openings; it departs from the reference
    /// implementation (off: the reference's chunks and durations exactly). A sentence of one word
    /// opening a chunk ("Right. Next we…") becomes a chunk of its own, since the model otherwise
    /// runs past it unsaid; and a chunk of up to 30 UTF-8 bytes gets 1.1 s more than the
    /// reference's estimate, tapering to nothing at 120 bytes, so short lines are not clipped.
    /// The extra time is not added when --fix-duration is given.
    #[arg(long = "short-fix")]
    pub short_fix: bool,
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
    /// Where the model runs: cpu, or cuda / cuda:N on a build with the `cuda` feature.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// GEMM weight precision: f32, or bf16 (bf16 products, f32 accumulation; on the CPU it needs AVX-512 BF16).
    #[arg(long, default_value = "f32")]
    pub precision: String,
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
    if !(args.target_rms.is_finite() && args.target_rms > 0.0 && args.target_rms <= 1.0) {
        bail!("--target-rms must be in (0, 1], got {}", args.target_rms);
    }
    let (voice, cut) = Voice::load_capped(&audio, &transcript, args.target_rms)?;
    if cut {
        let seconds = f5_audio::decode::DecodeLimit::REFERENCE.max_seconds;
        eprintln!("f5: {} is longer than {seconds} s; only its first {seconds} s were read (3–12 s of speech is best)", audio.display());
    }
    Ok(voice)
}

/// The official CLI's multi-voice text: `[name]` starts a piece spoken by voice `name` (a store
/// id; `main`, or an unknown name, is the voice given on the command line). Pieces are split
/// before every `[word]` tag, the tag removed, and the text trimmed; empty pieces are skipped.
pub fn voice_pieces(text: &str) -> Vec<(Option<String>, String)> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let tag_at = |rest: &str| -> Option<usize> {
        let inner = rest.strip_prefix('[')?;
        let end = inner.find(']')?;
        let name = &inner[..end];
        (!name.is_empty() && name.chars().all(is_word)).then_some(end + 2)
    };
    let mut starts = vec![0];
    for (i, _) in text.char_indices() {
        if i > 0 && tag_at(&text[i..]).is_some() {
            starts.push(i);
        }
    }
    starts.push(text.len());
    let mut out = Vec::new();
    for w in starts.windows(2) {
        let piece = &text[w[0]..w[1]];
        let (name, body) = match tag_at(piece) {
            Some(len) => (Some(piece[1..len - 1].to_string()), &piece[len..]),
            None => (None, piece),
        };
        let body = body.trim();
        if !body.is_empty() {
            out.push((name, body.to_string()));
        }
    }
    out
}

pub fn run(args: SynthArgs) -> Result<()> {
    let text = match (&args.text, &args.file) {
        (Some(t), None) => t.clone(),
        (None, Some(f)) => crate::read_text(f)?,
        _ => bail!("give the text to speak with --text or --file"),
    };
    if text.trim().is_empty() {
        bail!("the text to speak is empty");
    }
    let ext = args.output.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    if !matches!(ext.as_deref(), Some("wav") | Some("npy")) {
        bail!("{}: the output must end in .wav or .npy", args.output.display());
    }
    if let Some(p) = &args.spectrogram {
        check_spectrogram_path(p)?;
    }
    let hub = resolve::hub(args.quiet);
    let (model_path, vocab_path) = resolve::model(&hub, &args.model, args.vocab.as_deref())?;
    let vocoder_path = resolve::vocoder(&hub, &args.vocoder)?;
    let started = Instant::now();
    let paths = ModelPaths { model: model_path, vocab: vocab_path, vocoder: vocoder_path };
    match f5_gpukit::DeviceChoice::parse(&args.device, &args.precision)? {
        f5_gpukit::DeviceChoice::Cpu => {
            let threads = crate::limits::clamp_threads(args.threads);
            run_on(CpuBackend::with_threads(threads)?, args, text, ext, paths, started)
        }
        f5_gpukit::DeviceChoice::CpuBf16 => {
            let threads = crate::limits::clamp_threads(args.threads);
            run_on(f5_gpukit::CpuBf16Backend::with_threads(threads)?, args, text, ext, paths, started)
        }
        #[cfg(feature = "cuda")]
        f5_gpukit::DeviceChoice::Cuda { ordinal, bf16 } => {
            let options = f5_gpukit::CudaOptions::with_bf16_weights(bf16);
            let kit = f5_gpukit::CudaBackend::with_options(ordinal, options).with_context(|| format!("device cuda:{ordinal}"))?;
            run_on(kit, args, text, ext, paths, started)
        }
        #[cfg(not(feature = "cuda"))]
        f5_gpukit::DeviceChoice::Cuda { .. } => Err(crate::device::no_cuda()),
    }
}

/// Where the weights were resolved to.
struct ModelPaths {
    model: PathBuf,
    vocab: PathBuf,
    vocoder: PathBuf,
}

/// The synthesis itself, on whichever backend `--device` chose.
fn run_on<B: Backend + Clone>(
    kit: B,
    args: SynthArgs,
    text: String,
    ext: Option<String>,
    paths: ModelPaths,
    started: Instant,
) -> Result<()> {
    let mut synth = Synthesizer::open(&paths.model, &paths.vocab, &paths.vocoder, kit, &f5_dit::Overrides::default())?;
    if !args.quiet {
        let c = &synth.model.config;
        let variant = c.variant().map_or("mixed", |v| v.name());
        match &c.source {
            f5_dit::TraitSource::Yaml(p) => eprintln!("model: {variant}, {} heads of {} (from {})", c.heads, c.dim_head, p.display()),
            _ => eprintln!(
                "model: {variant}, {} heads of {} (no training config beside the checkpoint: defaults; put the model's .yaml beside it if it is a v0 model)",
                c.heads, c.dim_head
            ),
        }
    }
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
        short_fix: args.short_fix,
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
    let mut progress = |p: Progress<'_>| match p {
        Progress::Chunk { index, total, attempt, .. } => {
            chunk_count = total;
            if attempt > 0 {
                extra_attempts += 1;
            }
            bar.set_length(((total + extra_attempts) * opts.nfe) as u64);
            if attempt == 0 {
                bar.set_message(format!("{}/{total}", index + 1));
            } else {
                bar.set_message(format!("{}/{total} (misheard, attempt {})", index + 1, attempt + 1));
            }
        }
        Progress::Step { .. } => bar.inc(1),
    };
    // A wav without a mel to save or silences to remove is written as the chunks come out, so a
    // text of any length needs memory for one chunk only.
    let pieces = voice_pieces(&text);
    let multi_voice = pieces.iter().any(|(name, _)| name.is_some());
    let streaming =
        ext.as_deref() == Some("wav") && args.save_mel.is_none() && args.spectrogram.is_none() && !args.remove_silence && !multi_voice;
    let tmp = args.output.with_extension(format!("{}.partial", ext.as_deref().unwrap_or("out")));
    let (samples_written, seed, chunks, note, mel) = if streaming {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: f5_synth::SAMPLE_RATE,
            bits_per_sample: if args.float { 32 } else { 16 },
            sample_format: if args.float { hound::SampleFormat::Float } else { hound::SampleFormat::Int },
        };
        let mut writer = hound::WavWriter::create(&tmp, spec).with_context(|| format!("cannot create {}", tmp.display()))?;
        let (mut written, mut clipped, mut failed) = (0usize, 0usize, None::<hound::Error>);
        let result = synth.synthesize_streaming(&voice, &text, &opts, &mut progress, &mut |block| {
            for &x in block {
                if failed.is_some() {
                    return;
                }
                let r = if args.float {
                    writer.write_sample(x as f32)
                } else {
                    if x.abs() > 1.0 {
                        clipped += 1;
                    }
                    writer.write_sample(f5_audio::output::f64_to_pcm16(x))
                };
                if let Err(e) = r {
                    failed = Some(e);
                }
                written += 1;
            }
        });
        let (seed, chunks) = match result {
            Ok(v) => v,
            Err(e) => {
                drop(writer);
                let _ = std::fs::remove_file(&tmp);
                return Err(e.into());
            }
        };
        if let Some(e) = failed {
            let _ = std::fs::remove_file(&tmp);
            bail!("cannot write {}: {e}", tmp.display());
        }
        writer.finalize().with_context(|| format!("cannot write {}", tmp.display()))?;
        let note = if clipped > 0 { format!(", {clipped} samples beyond full scale clipped") } else { String::new() };
        (written, seed, chunks, note, Vec::new())
    } else {
        let audio = if multi_voice {
            // Each piece in its own voice, plainly concatenated, as the official CLI does.
            let mut voices: std::collections::HashMap<String, Voice> = std::collections::HashMap::new();
            let mut whole =
                f5_synth::Audio { samples: Vec::new(), mel: Vec::new(), seed: 0, chunks: Vec::new(), score: Default::default() };
            for (name, piece) in &pieces {
                let v = match name.as_deref() {
                    Some(n) if n != "main" && f5_synth::valid_id(n) => {
                        if !voices.contains_key(n) {
                            match resolve::voice(n) {
                                Ok((wav, transcript)) => {
                                    voices.insert(n.to_string(), Voice::load(&wav, &transcript, args.target_rms)?);
                                }
                                Err(_) => {
                                    eprintln!("voice [{n}] is not in the store: using the main voice for it");
                                }
                            }
                        }
                        voices.get(n).unwrap_or(&voice)
                    }
                    _ => &voice,
                };
                let part = synth.synthesize(v, piece, &opts, &mut progress)?;
                whole.seed = part.seed;
                whole.samples.extend_from_slice(&part.samples);
                whole.mel.extend_from_slice(&part.mel);
                whole.chunks.extend(part.chunks);
            }
            whole.score = whole.chunks.iter().map(|c| &c.score).collect();
            whole
        } else {
            synth.synthesize(&voice, &text, &opts, &mut progress)?
        };
        let mut samples = if args.remove_silence { f5_synth::remove_long_silences(&audio.samples)? } else { audio.samples.clone() };
        let peak = f5_audio::level::peak(&samples);
        let limited = ext.as_deref() == Some("wav") && !args.float && peak > 1.0;
        if limited {
            // 16-bit cannot hold it: scale down once instead of clipping.
            f5_audio::level::limit_peak(&mut samples, 1.0);
        }
        match ext.as_deref() {
            Some("npy") => npy::write_f32(&tmp, &[samples.len() as u64], &samples)?,
            _ => {
                let wide: Vec<f64> = samples.iter().map(|&v| v as f64).collect();
                if args.float {
                    f5_audio::output::write_wav_f32(&tmp, &wide, f5_synth::SAMPLE_RATE)?;
                } else {
                    f5_audio::output::write_wav_pcm16(&tmp, &wide, f5_synth::SAMPLE_RATE)?;
                }
            }
        }
        if let Some(p) = &args.save_mel {
            npy::write_f32(p, &[(audio.mel.len() / 100) as u64, 100], &audio.mel)?;
        }
        let note = if limited { format!(", peak {peak:.2} scaled to 1.0") } else { String::new() };
        (samples.len(), audio.seed, audio.chunks, note, audio.mel)
    };
    std::fs::rename(&tmp, &args.output).with_context(|| format!("cannot write {}", args.output.display()))?;
    bar.finish_and_clear();
    let synth_seconds = synth_started.elapsed().as_secs_f64();
    let total: f5_synth::TotalScore = chunks.iter().map(|c| &c.score).collect();
    let secs = samples_written as f64 / f5_synth::SAMPLE_RATE as f64;
    if let Some(p) = &args.report_json {
        write_report(p, &args, &opts, seed, secs, &chunks, &total, load_seconds, synth_seconds)?;
    }
    let score = if args.transcriber.is_none() {
        String::new()
    } else {
        match total.wer() {
            Some(w) => format!(
                ", heard WER {:.1}% ({} of {} words; {} regenerated, {} unchecked)",
                w * 100.0,
                total.errors,
                total.words,
                total.regenerated,
                total.unchecked
            ),
            None => ", unchecked (the transcriber did not answer)".to_string(),
        }
    };
    eprintln!(
        "{}: {secs:.2} s of audio in {synth_seconds:.1} s (RTF {:.2}), {chunk_count} chunk{}, seed {seed}{note}{score}",
        args.output.display(),
        synth_seconds / secs.max(1e-9),
        if chunk_count == 1 { "" } else { "s" },
    );
    // Last, so a failure here costs neither the audio nor the report.
    if let Some(p) = &args.spectrogram {
        spectrogram::write_png(p, &mel, f5_audio::mel::N_MELS)
            .with_context(|| format!("the audio was written to {}, the spectrogram was not", args.output.display()))?;
    }
    Ok(())
}

/// Refuses, before any synthesis, a spectrogram path that cannot work: the wrong extension or a
/// directory that does not exist. What only the write itself can tell (permissions, a full disk)
/// is reported after the audio is written.
fn check_spectrogram_path(path: &Path) -> Result<()> {
    if !path.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        bail!("{}: the spectrogram must end in .png", path.display());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!("{}: cannot write the spectrogram there, {} is not a directory", path.display(), dir.display());
    }
    if path.is_dir() {
        bail!("{}: cannot write the spectrogram there, it is a directory", path.display());
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn write_report(
    path: &Path,
    args: &SynthArgs,
    opts: &SynthOptions,
    seed: u64,
    audio_seconds: f64,
    chunks: &[f5_synth::ChunkReport],
    total: &f5_synth::TotalScore,
    load_seconds: f64,
    synth_seconds: f64,
) -> Result<()> {
    let chunks: Vec<_> = chunks
        .iter()
        .map(|c| {
            serde_json::json!({
                "text": c.text, "frames": c.frames, "short_fix_frames": c.short_fix_frames, "generated_frames": c.generated_frames, "samples": c.samples, "seconds": c.seconds,
                "attempts": c.score.attempts, "checked": c.score.checked, "wer": c.score.wer, "errors": c.score.errors, "words": c.score.words,
                "heard": c.score.transcript, "problem": c.score.problem,
            })
        })
        .collect();
    let report = serde_json::json!({
        "model": args.model,
        "vocoder": args.vocoder,
        "options": {"nfe": opts.nfe, "cfg": opts.cfg, "sway": opts.sway, "speed": opts.speed, "cross_fade": opts.cross_fade, "fix_duration": opts.fix_duration, "short_fix": opts.short_fix},
        "seed": seed,
        "audio_seconds": audio_seconds,
        "load_seconds": load_seconds,
        "synth_seconds": synth_seconds,
        "chunks": chunks,
        "score": {"words": total.words, "errors": total.errors, "attempts": total.attempts, "unchecked": total.unchecked, "regenerated": total.regenerated, "wer": total.wer()},
    });
    std::fs::write(path, serde_json::to_string_pretty(&report)?).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::voice_pieces;

    #[test]
    fn voice_tags_split_like_the_official_cli() {
        let p = voice_pieces("Hello there. [bob] Hi! [main]Back to me. [x-y] not a tag [c_2] end");
        let names: Vec<Option<&str>> = p.iter().map(|(n, _)| n.as_deref()).collect();
        assert_eq!(names, [None, Some("bob"), Some("main"), Some("c_2")]);
        assert_eq!(p[2].1, "Back to me. [x-y] not a tag");
        assert_eq!(voice_pieces("no tags at all"), vec![(None, "no tags at all".to_string())]);
        assert!(voice_pieces("[a]   [b]").is_empty());
    }
}
