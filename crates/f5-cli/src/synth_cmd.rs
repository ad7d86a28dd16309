//! `f5 synth`: the main job.

mod spectrogram;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use f5_synth::{ModelFiles, Progress, SpeakOptions, SpeechEngine, Voice, VoiceRef};

use crate::model_args::{ModelArgs, RunArgs};
use crate::{npy, resolve};

#[derive(Args)]
pub struct SynthArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The voice. Kokoro: a voice name (af_heart, the default; am_adam, bf_emma, …), a voice
    /// file (.pt, .bin), or a weighted mix such as `af_bella(2)+af_sky`. F5: an id in the voice
    /// store (`f5 voices list`), or a directory with reference.wav (or .mp3/.flac/.ogg) and
    /// config.json holding {"transcript": "..."}.
    #[arg(long, conflicts_with_all = ["reference", "reference_text"])]
    pub voice: Option<String>,
    /// F5: the reference recording (wav, mp3, flac, ogg); 3–12 s of clean speech works best.
    /// Longer recordings are clipped at a pause, as the reference implementation does.
    #[arg(long = "ref")]
    pub reference: Option<PathBuf>,
    /// F5: exactly what is said in the reference recording (with --transcriber it may be left
    /// out: the transcriber then hears it, and f5 shows what it heard).
    #[arg(long = "ref-text")]
    pub reference_text: Option<String>,
    /// The text to speak. `[name]` tags switch voices mid-text (store ids; `[main]` is the voice
    /// given here), as the official CLI's multi-voice mode does.
    #[arg(long, short = 't', conflicts_with = "file")]
    pub text: Option<String>,
    /// A UTF-8 file with the text to speak ("-" for standard input).
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// Output file, its format by extension: .wav (16-bit PCM; --float for 32-bit float), .mp3,
    /// .opus (Ogg), .flac, .pcm (raw s16le) or .npy (float32 samples, 24 kHz). `-` writes the
    /// audio to standard output as it is made (wav unless --format says otherwise). Without -o,
    /// on a terminal the file is named after the text (hello-there.wav); piped, the audio goes
    /// to standard output.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Play the result when it is written, with the first audio player found (paplay, aplay,
    /// pw-play, ffplay, afplay, play); says which, or why none.
    #[arg(long)]
    pub play: bool,
    /// The output format, whatever the file is called: wav, mp3, opus, flac or pcm.
    #[arg(long)]
    pub format: Option<String>,
    /// Write 32-bit float wav samples instead of 16-bit.
    #[arg(long)]
    pub float: bool,
    /// F5: ODE steps: fewer is faster; 32 (the default) is the reference's (16 and 8 use pruned schedules).
    #[arg(long)]
    pub nfe: Option<usize>,
    /// F5: classifier-free guidance strength (default 2).
    #[arg(long)]
    pub cfg: Option<f32>,
    /// F5: sway sampling coefficient (spends more steps early, where the flow curves; default −1); 0 disables.
    #[arg(long, allow_hyphen_values = true)]
    pub sway: Option<f32>,
    /// Speaking rate: > 1 faster, < 1 slower (scales the duration estimate).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Noise seed, for a reproducible result (printed when not given).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Cross-fade between chunks of a long text, seconds (default: F5 0.15, Kokoro none, as
    /// their reference pipelines join chunks).
    #[arg(long = "cross-fade")]
    pub cross_fade: Option<f64>,
    /// Kokoro: the language of the text (en-us, en-gb, es, fr, hi, it, pt-br; default from
    /// the voice's first letter: a = en-us, b = en-gb, e = es, …).
    #[arg(long)]
    pub lang: Option<String>,
    /// Kokoro: the text is phonemes (at most 510), given to the model as they are.
    #[arg(long)]
    pub phonemes: bool,
    /// Kokoro: put when each word is spoken into the --report-json report.
    #[arg(long = "word-timestamps", requires = "report_json")]
    pub word_timestamps: bool,
    /// F5: total duration in seconds (reference included) instead of the estimate.
    #[arg(long = "fix-duration")]
    pub fix_duration: Option<f64>,
    /// Remove pauses of a second or more from the result (the reference's remove_silence).
    #[arg(long = "remove-silence")]
    pub remove_silence: bool,
    /// F5: loudness the reference is raised to when quieter (the result is scaled back by the
    /// same factor, so you hear your own loudness).
    #[arg(long = "target-rms", default_value_t = 0.1)]
    pub target_rms: f32,
    /// F5: write the generated mel [frames, 100] (all chunks) to this .npy.
    #[arg(long = "save-mel")]
    pub save_mel: Option<PathBuf>,
    /// F5: write a picture of the generated log-mel (all chunks) to this .png: time left to right,
    /// one pixel per frame; low frequencies at the bottom. The audio is written first: if the
    /// image cannot be, the audio stays and f5 exits with an error.
    #[arg(long)]
    pub spectrogram: Option<PathBuf>,
    /// F5: this project's rule for short lines and one-word openings; it departs from the reference
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
    /// Listen back: do not split a chunk that is still misheard after its retries into
    /// sentences (by default each sentence is then generated and checked on its own).
    #[arg(long = "no-split-on-fail")]
    pub no_split_on_fail: bool,
    /// Listen back: the highest word error rate (0–1) a chunk may have.
    #[arg(long = "max-wer", default_value_t = 0.3)]
    pub max_wer: f64,
    #[command(flatten)]
    pub run: RunArgs,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// The voice for models with named voices when `--voice` is not given.
pub const DEFAULT_VOICE: &str = "af_heart";

/// A reference recording and its transcript, prepared (families that clone), and what the
/// ≤ 12 s rule cut from it. A recording that lost speech is refused unless `--transcriber` is
/// given, which then transcribes the part that is kept.
fn load_recording(args: &SynthArgs) -> Result<(Voice, Option<ReferenceClip>)> {
    let (audio, transcript) = match (&args.voice, &args.reference, &args.reference_text) {
        (Some(name), _, _) => resolve::voice(name)?,
        (None, Some(wav), Some(t)) => (wav.clone(), t.clone()),
        (None, Some(wav), None) => return transcribed_recording(args, wav),
        (None, None, Some(_)) => bail!("--ref-text goes with --ref WAV, the recording it transcribes"),
        _ => bail!(
            "this model clones a voice: give --voice ID (a stored voice or a directory), or --ref WAV with --ref-text \"what it says\""
        ),
    };
    if !(args.target_rms.is_finite() && args.target_rms > 0.0 && args.target_rms <= 1.0) {
        bail!("--target-rms must be in (0, 1], got {}", args.target_rms);
    }
    let voice = Voice::load_kept(&audio, &transcript, args.target_rms)?;
    let Some(clipped) = voice.clipped else { return Ok((voice, None)) };
    let Some(addr) = &args.transcriber else {
        let e = voice.require_whole().err().map(|e| e.to_string()).unwrap_or_default();
        bail!("{}: {e} (or pass --transcriber HOST:PORT to transcribe the kept part)", audio.display());
    };
    let transcriber = f5_verify::Transcriber::new(addr, args.language.clone()).with_context(|| format!("transcriber {addr}"))?;
    let heard = f5_verify::Transcribe::transcribe(&transcriber, &voice.wave, 24_000)
        .with_context(|| format!("transcriber {addr}"))?
        .filter(|t| !t.trim().is_empty());
    let Some(heard) = heard else {
        bail!(
            "{}: {}; the transcriber {addr} gave no transcript of the kept part: trim the recording to 3–12 s of speech",
            audio.display(),
            clipped.describe()
        );
    };
    let heard = heard.trim().to_string();
    eprintln!("f5: {}: {}; the transcriber heard in the kept part: \"{heard}\"", audio.display(), clipped.describe());
    Ok((voice.with_transcript(&heard)?, Some(ReferenceClip { clipped, transcript: heard })))
}

/// A reference recording without its transcript: the transcriber (`--transcriber`) hears the
/// part that is kept, and f5 shows what it heard.
fn transcribed_recording(args: &SynthArgs, wav: &Path) -> Result<(Voice, Option<ReferenceClip>)> {
    let Some(addr) = &args.transcriber else {
        bail!("--ref needs --ref-text \"exactly what the recording says\" (or --transcriber HOST:PORT to transcribe it)");
    };
    if !(args.target_rms.is_finite() && args.target_rms > 0.0 && args.target_rms <= 1.0) {
        bail!("--target-rms must be in (0, 1], got {}", args.target_rms);
    }
    // The transcript is replaced by what is heard; until then a placeholder stands in.
    let voice = Voice::load_kept(wav, "…", args.target_rms)?;
    let transcriber = f5_verify::Transcriber::new(addr, args.language.clone()).with_context(|| format!("transcriber {addr}"))?;
    let heard = f5_verify::Transcribe::transcribe(&transcriber, &voice.wave, 24_000)
        .with_context(|| format!("transcriber {addr}"))?
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let Some(heard) = heard else {
        bail!("{}: the transcriber {addr} gave no transcript; give it with --ref-text", wav.display());
    };
    let clip = voice.clipped.map(|clipped| ReferenceClip { clipped, transcript: heard.clone() });
    let kept = match &clip {
        Some(c) => format!(" ({}; what was heard is of the kept part)", c.clipped.describe()),
        None => String::new(),
    };
    eprintln!("f5: {}: the transcriber heard \"{heard}\"{kept}", wav.display());
    Ok((voice.with_transcript(&heard)?, clip))
}

/// What the report says of a reference recording the ≤ 12 s rule cut.
struct ReferenceClip {
    clipped: f5_synth::Clipped,
    /// What the transcriber heard in the kept part (the transcript used instead of the given one).
    transcript: String,
}

/// The voice of the whole text: a recording for a model that clones (or whenever --ref is
/// given, so a model that does not clone can say so), else a name.
fn main_voice(args: &SynthArgs, engine: &dyn SpeechEngine) -> Result<(VoiceRef, Option<ReferenceClip>)> {
    if engine.info().clones_from_recording || args.reference.is_some() {
        let (voice, clip) = load_recording(args)?;
        return Ok((VoiceRef::Recording(Arc::new(voice)), clip));
    }
    if args.target_rms != 0.1 {
        bail!("--target-rms applies to reference recordings; this model speaks in named voices");
    }
    Ok((VoiceRef::Named(args.voice.clone().unwrap_or_else(|| DEFAULT_VOICE.to_string())), None))
}

/// The voice of a `[name]` piece of a multi-voice text: a store id for a model that clones, a
/// voice name otherwise. A name that is neither is an error naming the tag: speaking the piece
/// in the main voice instead would hide a typo in the text.
fn piece_voice(name: &str, args: &SynthArgs, engine: &dyn SpeechEngine, files: &ModelFiles) -> Result<VoiceRef> {
    if engine.info().clones_from_recording {
        let (wav, transcript) = resolve::voice(name).map_err(|e| anyhow::anyhow!("voice [{name}] in the text: {e:#}"))?;
        return Ok(VoiceRef::Recording(Arc::new(Voice::load(&wav, &transcript, args.target_rms)?)));
    }
    files.check_voice_name(name).map_err(|e| anyhow::anyhow!("voice [{name}] in the text: {e}"))?;
    Ok(VoiceRef::Named(name.to_string()))
}

/// The official CLI's multi-voice text: `[name]` starts a piece spoken by voice `name` (a store
/// id; `main` is the voice given on the command line; an unknown name is an error). Pieces are split
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
    let output = match &args.output {
        Some(o) => o.clone(),
        None if std::io::IsTerminal::is_terminal(&std::io::stdout()) => {
            let name = name_from_text(&text, args.format.as_deref().unwrap_or("wav"));
            eprintln!("f5: writing {} (name the file with -o)", name.display());
            name
        }
        None => PathBuf::from("-"),
    };
    let kind = output_kind(&args, &output)?;
    let to_stdout = output.as_os_str() == "-";
    if args.play && to_stdout {
        bail!("--play plays a file; with -o - the audio goes to standard output (pipe it to a player)");
    }
    if let Some(p) = &args.spectrogram {
        check_spectrogram_path(p)?;
    }
    let hub = Arc::new(resolve::hub(args.quiet));
    let files = args.model.files(&hub)?;
    let started = Instant::now();
    let mut engine = args.run.open(&files)?;
    if !args.quiet {
        eprintln!("model: {}", engine.describe());
    }
    if let Some(addr) = &args.transcriber {
        let transcriber = f5_verify::Transcriber::new(addr, args.language.clone()).with_context(|| format!("transcriber {addr}"))?;
        let language = f5_verify::language_for(args.language.as_deref());
        engine.set_listen_back(f5_synth::ListenBack { transcriber: Box::new(transcriber), language });
    }
    let engine: &dyn SpeechEngine = &*engine;
    let (voice, reference_clip) = main_voice(&args, engine)?;
    let load_seconds = started.elapsed().as_secs_f64();
    let mut opts = SpeakOptions::default();
    opts.speed = args.speed;
    opts.seed = args.seed;
    opts.cross_fade = args.cross_fade;
    opts.retries = args.retries;
    opts.max_wer = args.max_wer;
    opts.nfe = args.nfe;
    opts.cfg = args.cfg;
    opts.sway = args.sway;
    opts.fix_duration = args.fix_duration;
    opts.short_fix = args.short_fix;
    opts.lang = args.lang.clone();
    opts.phonemes = args.phonemes;
    opts.word_timestamps = args.word_timestamps;
    opts.split_on_fail = !args.no_split_on_fail;
    // Audio piped to a player starts after one short chunk (Kokoro); a file keeps the reference's chunks.
    opts.quick_start = to_stdout;
    if (args.save_mel.is_some() || args.spectrogram.is_some()) && !engine.info().clones_from_recording {
        bail!("--save-mel and --spectrogram show the mel an F5 model generates; this model makes audio directly");
    }
    if !args.quiet && args.transcriber.is_some() {
        eprintln!("{}", engine.gate_status(&opts));
    }
    let bar = if args.quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(0) };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} chunk {msg} [{bar:30}] {pos}/{len}, {elapsed}")
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
            if attempt == 0 {
                bar.set_message(format!("{}/{total}", index + 1));
            } else {
                bar.set_message(format!("{}/{total} (misheard, attempt {})", index + 1, attempt + 1));
            }
        }
        // Families that step (F5's ODE) count steps; the others show the chunk only.
        Progress::Step { steps, .. } => {
            bar.set_length(((chunk_count + extra_attempts) * steps) as u64);
            bar.inc(1);
        }
    };
    // Audio without a mel to save or silences to remove is written as the chunks come out, so a
    // text of any length needs memory for one chunk only (and `-o -` plays while it is made).
    let pieces = voice_pieces(&text);
    let multi_voice = pieces.iter().any(|(name, _)| name.is_some());
    // An mp3 file is written whole, with its gapless tag (exact length); a stream has none.
    let gapless_mp3 = matches!(kind, OutputKind::Encoded(f5_audio::encode::AudioFormat::Mp3)) && !to_stdout;
    let streaming = matches!(kind, OutputKind::Encoded(_))
        && !gapless_mp3
        && args.save_mel.is_none()
        && args.spectrogram.is_none()
        && !args.remove_silence
        && !multi_voice;
    let rate = engine.info().sample_rate;
    let tmp = output.with_extension(format!("{}.partial", output.extension().and_then(|e| e.to_str()).unwrap_or("out")));
    // Encoded audio goes through `out`; npy and float wav are written to `tmp` whole.
    let mut out = match kind {
        OutputKind::Encoded(_) => Some(Destination::open(&output, &tmp, to_stdout)?),
        _ => None,
    };
    let (samples_written, seed, chunks, words, note, mel) =
        if let (true, OutputKind::Encoded(format), Some(dest)) = (streaming, &kind, out.as_mut()) {
            let mut writer = StreamWriter::new(*format, rate, dest)?;
            let result = engine.speak(&voice, &text, &opts, &mut progress, &mut |block| writer.push(block));
            let spoken = match result.map_err(anyhow::Error::from).and_then(|s| writer.finish().map(|w| (s, w))) {
                Ok(v) => v,
                Err(e) => {
                    drop(out);
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            };
            let (spoken, (written, clipped)) = spoken;
            let note = if clipped > 0 { format!(", {clipped} samples beyond full scale clipped") } else { String::new() };
            (written, spoken.seed, spoken.chunks, spoken.words, note, Vec::new())
        } else {
            let audio = if multi_voice {
                // Each piece in its own voice, plainly concatenated, as the official CLI does.
                let mut whole = f5_synth::Audio::default();
                for (name, piece) in &pieces {
                    let piece_voice = match name.as_deref() {
                        Some(n) if n != "main" => Some(piece_voice(n, &args, engine, &files)?),
                        _ => None,
                    };
                    let offset = whole.samples.len() as f64 / rate as f64;
                    let part = f5_synth::speak_to_memory(engine, piece_voice.as_ref().unwrap_or(&voice), piece, &opts, &mut progress)?;
                    whole.seed = part.seed;
                    whole.samples.extend_from_slice(&part.samples);
                    whole.mel.extend_from_slice(&part.mel);
                    whole.chunks.extend(part.chunks);
                    whole.words.extend(part.words.into_iter().map(|w| f5_synth::WordTime {
                        start: w.start + offset,
                        end: w.end + offset,
                        ..w
                    }));
                }
                whole.score = whole.chunks.iter().map(|c| &c.score).collect();
                whole
            } else {
                f5_synth::speak_to_memory(engine, &voice, &text, &opts, &mut progress)?
            };
            let mut samples = if args.remove_silence { f5_synth::remove_long_silences(&audio.samples)? } else { audio.samples.clone() };
            let peak = f5_audio::level::peak(&samples);
            let limited = matches!(kind, OutputKind::Encoded(_)) && peak > 1.0;
            if limited {
                // 16 bits cannot hold it: scale down once instead of clipping.
                f5_audio::level::limit_peak(&mut samples, 1.0);
            }
            let written = match &kind {
                OutputKind::Npy => npy::write_f32(&tmp, &[samples.len() as u64], &samples).map(|_| ()),
                OutputKind::FloatWav => {
                    let wide: Vec<f64> = samples.iter().map(|&v| v as f64).collect();
                    f5_audio::output::write_wav_f32(&tmp, &wide, rate).map_err(anyhow::Error::from)
                }
                OutputKind::Encoded(format) => match out.as_mut() {
                    Some(dest) => f5_audio::encode::encode_whole(*format, &samples, rate, 1)
                        .map_err(anyhow::Error::from)
                        .and_then(|bytes| dest.write_all(&bytes))
                        .and_then(|_| dest.flush()),
                    None => Err(anyhow::anyhow!("no destination for the encoded audio")),
                },
            };
            if let Err(e) = written {
                drop(out);
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            if let Some(p) = &args.save_mel {
                npy::write_f32(p, &[(audio.mel.len() / 100) as u64, 100], &audio.mel)?;
            }
            let note = if limited { format!(", peak {peak:.2} scaled to 1.0") } else { String::new() };
            (samples.len(), audio.seed, audio.chunks, audio.words, note, audio.mel)
        };
    if let Some(dest) = out {
        dest.close()?;
    }
    if !to_stdout {
        std::fs::rename(&tmp, &output).with_context(|| format!("cannot write {}", output.display()))?;
    }
    bar.finish_and_clear();
    let synth_seconds = synth_started.elapsed().as_secs_f64();
    let total: f5_synth::TotalScore = chunks.iter().map(|c| &c.score).collect();
    let secs = samples_written as f64 / engine.info().sample_rate as f64;
    if let Some(p) = &args.report_json {
        let run = RunFacts {
            family: engine.info().family,
            seed,
            audio_seconds: secs,
            load_seconds,
            synth_seconds,
            reference_clip: reference_clip.as_ref(),
        };
        write_report(p, &args, &opts, &run, &chunks, &words, &total)?;
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
        "{}: {secs:.2} s of audio in {synth_seconds:.1} s (RTF {:.2}), {} chunk{}, seed {seed}{note}{score}",
        output.display(),
        synth_seconds / secs.max(1e-9),
        // The report's chunks: every piece of a multi-voice text, not only the last one's.
        chunks.len(),
        if chunks.len() == 1 { "" } else { "s" },
    );
    // Last, so a failure here costs neither the audio nor the report.
    if let Some(p) = &args.spectrogram {
        spectrogram::write_png(p, &mel, f5_audio::mel::N_MELS)
            .with_context(|| format!("the audio was written to {}, the spectrogram was not", output.display()))?;
    }
    if args.play {
        play(&output)?;
    }
    Ok(())
}

/// A file name for the audio of `text`: its first words, lower-case, joined by '-' (at most 40
/// characters; `speech` when it has none), not overwriting an existing file.
fn name_from_text(text: &str, extension: &str) -> PathBuf {
    let mut stem = String::new();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        if stem.len() + word.len() + 1 > 40 {
            break;
        }
        if !stem.is_empty() {
            stem.push('-');
        }
        stem.push_str(&word);
    }
    if stem.is_empty() {
        stem.push_str("speech");
    }
    let mut name = PathBuf::from(format!("{stem}.{extension}"));
    let mut n = 2;
    while name.exists() {
        name = PathBuf::from(format!("{stem}-{n}.{extension}"));
        n += 1;
    }
    name
}

/// Audio players tried by `--play`, in order, with the arguments that make them play one file
/// and exit.
const PLAYERS: [(&str, &[&str]); 6] = [
    ("paplay", &[]),
    ("aplay", &["-q"]),
    ("pw-play", &[]),
    ("ffplay", &["-nodisp", "-autoexit", "-loglevel", "quiet"]),
    ("afplay", &[]),
    ("play", &["-q"]),
];

/// Plays `file` with the first player on `PATH`, saying which; none found is an error that
/// lists what was looked for (the audio stays written).
fn play(file: &Path) -> Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = PLAYERS
        .iter()
        .find_map(|(name, args)| std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file()).map(|p| (*name, p, *args)));
    let Some((name, program, args)) = found else {
        let names: Vec<&str> = PLAYERS.iter().map(|(n, _)| *n).collect();
        bail!("{} is written; --play found no audio player (looked for {})", file.display(), names.join(", "));
    };
    eprintln!("f5: playing {} with {name}", file.display());
    let status = Command::new(&program).args(args).arg(file).status().with_context(|| format!("cannot run {}", program.display()))?;
    if !status.success() {
        bail!("{} is written; {name} could not play it ({status})", file.display());
    }
    Ok(())
}

/// What the output is written as.
enum OutputKind {
    /// Raw float32 samples in a .npy.
    Npy,
    /// 32-bit float wav (`--float`).
    FloatWav,
    /// 16-bit samples in one of the encoded formats (wav, pcm, mp3, opus, flac).
    Encoded(f5_audio::encode::AudioFormat),
}

/// The output's kind from `--format`, `-o -` or the file's extension; refused before anything
/// loads when it cannot be written.
fn output_kind(args: &SynthArgs, output: &Path) -> Result<OutputKind> {
    use f5_audio::encode::AudioFormat;
    let to_stdout = output.as_os_str() == "-";
    if let Some(name) = &args.format {
        if args.float {
            bail!("--float writes a 32-bit float wav; it does not combine with --format");
        }
        return Ok(OutputKind::Encoded(AudioFormat::from_name(name)?));
    }
    if to_stdout {
        if args.float {
            bail!("--float writes a file; standard output takes --format wav, mp3, opus, flac or pcm");
        }
        return Ok(OutputKind::Encoded(AudioFormat::Wav));
    }
    let ext = output.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("npy") => Ok(OutputKind::Npy),
        Some("wav") if args.float => Ok(OutputKind::FloatWav),
        Some(e) if AudioFormat::from_extension(e).is_ok() && !args.float => Ok(OutputKind::Encoded(AudioFormat::from_extension(e)?)),
        _ => bail!(
            "{}: the output must end in .wav, .mp3, .opus, .flac, .pcm or .npy (or name the format with --format){}",
            output.display(),
            if args.float { "; --float needs .wav" } else { "" }
        ),
    }
}

/// Where the audio goes: a temporary file renamed into place at the end, or standard output.
enum Destination {
    File(std::io::BufWriter<std::fs::File>),
    Stdout(std::io::Stdout),
}

impl Destination {
    fn open(output: &Path, tmp: &Path, to_stdout: bool) -> Result<Destination> {
        if to_stdout {
            return Ok(Destination::Stdout(std::io::stdout()));
        }
        let f = std::fs::File::create(tmp).with_context(|| format!("cannot create {} (for {})", tmp.display(), output.display()))?;
        Ok(Destination::File(std::io::BufWriter::new(f)))
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        match self {
            Destination::File(f) => f.write_all(bytes),
            Destination::Stdout(o) => o.write_all(bytes),
        }
        .context("cannot write the audio")
    }

    fn flush(&mut self) -> Result<()> {
        use std::io::Write;
        match self {
            Destination::File(f) => f.flush(),
            Destination::Stdout(o) => o.flush(),
        }
        .context("cannot write the audio")
    }

    /// Writes `bytes` over the start of a file (a header whose sizes are known only at the
    /// end); standard output cannot be rewound and keeps the streaming header.
    fn patch_start(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        if let Destination::File(f) = self {
            f.flush().context("cannot write the audio")?;
            let file = f.get_mut();
            file.seek(SeekFrom::Start(0))
                .and_then(|_| file.write_all(bytes))
                .and_then(|_| file.seek(SeekFrom::End(0)).map(|_| ()))
                .context("cannot write the audio")?;
        }
        Ok(())
    }

    fn close(self) -> Result<()> {
        match self {
            Destination::File(f) => f.into_inner().map_err(|e| e.into_error()).and_then(|f| f.sync_all()).context("cannot write the audio"),
            Destination::Stdout(mut o) => {
                use std::io::Write;
                o.flush().context("cannot write the audio")
            }
        }
    }
}

/// Writes a stream of samples as they come, through f5-audio's streaming encoder (16-bit:
/// samples beyond full scale clip, and are counted).
struct StreamWriter<'a> {
    out: &'a mut Destination,
    encoder: f5_audio::encode::StreamEncoder,
    written: usize,
    clipped: usize,
    failed: Option<anyhow::Error>,
}

impl<'a> StreamWriter<'a> {
    fn new(format: f5_audio::encode::AudioFormat, rate: u32, out: &'a mut Destination) -> Result<Self> {
        Ok(StreamWriter { out, encoder: f5_audio::encode::StreamEncoder::mono(format, rate)?, written: 0, clipped: 0, failed: None })
    }

    fn push(&mut self, block: &[f64]) {
        if self.failed.is_some() {
            return;
        }
        self.written += block.len();
        self.clipped += block.iter().filter(|x| x.abs() > 1.0).count();
        // As f32, the precision of a whole synthesis' samples: a stream and a whole file agree.
        let samples: Vec<f32> = block.iter().map(|&x| x as f32).collect();
        let r = self.encoder.push(&samples).map_err(anyhow::Error::from).and_then(|bytes| self.out.write_all(&bytes));
        if let Err(e) = r {
            self.failed = Some(e);
        }
    }

    /// The rest of the stream (and, in a file, the header with the final sizes); returns the
    /// samples written and how many clipped.
    fn finish(mut self) -> Result<(usize, usize)> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let tail = self.encoder.finish()?;
        self.out.write_all(&tail)?;
        if let Some(header) = self.encoder.header_fixup() {
            self.out.patch_start(&header)?;
        }
        self.out.flush()?;
        Ok((self.written, self.clipped))
    }
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

/// What the report says about the run as a whole.
struct RunFacts<'a> {
    family: &'static str,
    reference_clip: Option<&'a ReferenceClip>,
    seed: u64,
    audio_seconds: f64,
    load_seconds: f64,
    synth_seconds: f64,
}

fn write_report(
    path: &Path,
    args: &SynthArgs,
    opts: &SpeakOptions,
    run: &RunFacts<'_>,
    chunks: &[f5_synth::ChunkReport],
    words: &[f5_synth::WordTime],
    total: &f5_synth::TotalScore,
) -> Result<()> {
    fn chunk_json(c: &f5_synth::ChunkReport) -> serde_json::Value {
        let mut j = serde_json::json!({
            "text": c.text, "frames": c.frames, "short_fix_frames": c.short_fix_frames, "generated_frames": c.generated_frames, "samples": c.samples, "seconds": c.seconds,
            "attempts": c.score.attempts, "checked": c.score.checked, "wer": c.score.wer, "errors": c.score.errors, "words": c.score.words,
            "heard": c.score.transcript, "problem": c.score.problem,
        });
        if let Some(split) = &c.split {
            j["split"] = serde_json::json!({
                "whole": {"attempts": split.whole.attempts, "wer": split.whole.wer, "heard": split.whole.transcript},
                "parts": split.parts.iter().map(chunk_json).collect::<Vec<_>>(),
            });
        }
        j
    }
    let chunks: Vec<_> = chunks.iter().map(chunk_json).collect();
    let mut report = serde_json::json!({
        "model": args.model.name,
        "family": run.family,
        "vocoder": args.model.vocoder,
        "voice": args.voice,
        "options": {"nfe": opts.nfe, "cfg": opts.cfg, "sway": opts.sway, "speed": opts.speed, "cross_fade": opts.cross_fade, "fix_duration": opts.fix_duration, "short_fix": opts.short_fix, "lang": opts.lang, "phonemes": opts.phonemes, "split_on_fail": opts.split_on_fail},
        "seed": run.seed,
        "audio_seconds": run.audio_seconds,
        "load_seconds": run.load_seconds,
        "synth_seconds": run.synth_seconds,
        "chunks": chunks,
        "score": {"words": total.words, "errors": total.errors, "attempts": total.attempts, "unchecked": total.unchecked, "regenerated": total.regenerated, "wer": total.wer()},
    });
    if opts.word_timestamps {
        report["words"] = serde_json::to_value(words)?;
    }
    if let Some(r) = run.reference_clip {
        report["reference_clipped"] = serde_json::json!({
            "speech_seconds": r.clipped.speech_seconds, "kept_seconds": r.clipped.kept_seconds,
            "kept_speech_seconds": r.clipped.kept_speech_seconds, "file_cut": r.clipped.file_cut,
            "transcript_used": r.transcript,
        });
    }
    std::fs::write(path, serde_json::to_string_pretty(&report)?).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::{name_from_text, voice_pieces};

    #[test]
    fn a_file_name_from_the_text() {
        assert_eq!(name_from_text("Hello there, world!", "wav"), std::path::PathBuf::from("hello-there-world.wav"));
        assert_eq!(name_from_text("¡Árbol grande! 3 cats", "mp3"), std::path::PathBuf::from("árbol-grande-3-cats.mp3"));
        assert_eq!(name_from_text("...", "wav"), std::path::PathBuf::from("speech.wav"));
        let long = name_from_text("one two three four five six seven eight nine ten eleven twelve", "wav");
        assert!(long.to_str().unwrap().len() <= 44, "{long:?}");
    }

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
