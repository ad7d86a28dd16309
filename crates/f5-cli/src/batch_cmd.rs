//! `f5 batch`: many utterances from a JSONL file, one model load, resumable and shardable.
//!
//! Every line of the job file is one utterance: `{"id": …, "text": …, "voice": …, "options": {…}}`
//! (F5: `"ref"` + `"ref_text"` instead of, or as well as, a store voice). The whole file is read
//! and checked before the model loads, by every worker alike, so a bad line stops all shards
//! with the same message naming its line number, and no shard starts work the others refuse.
//!
//! Sharding: the utterance on line L (1-based, every line of the file counted, blank ones too)
//! belongs to shard `(L - 1) mod N` of `--shard I/N` (I from 0, as Slurm's
//! `SLURM_ARRAY_TASK_ID` and Kubernetes' `JOB_COMPLETION_INDEX` count). The line index rather
//! than a hash of the id keeps shards balanced to within one utterance and lets a person see
//! which worker owns a line; editing the file between runs moves lines between shards, which
//! is harmless because finished ids are skipped wherever they were made.
//!
//! Outputs: `OUT/ID.wav` and then `OUT/ID.json` (the report), each written to a temporary file
//! in OUT and renamed into place, so a reader never sees half a file. The report is written
//! last and is the mark of a finished utterance: a rerun skips an id whose `ID.json` and
//! `ID.wav` both exist, and redoes one killed between the two renames. Without a seed in its
//! options an utterance gets one derived from its id, so a rerun or another sharding makes the
//! same audio.

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use f5_synth::{SpeakOptions, SpeechEngine, Voice, VoiceRef};
use serde::Deserialize;

use crate::model_args::{ModelArgs, RunArgs};
use crate::{resolve, synth_cmd};

#[derive(Args)]
pub struct BatchArgs {
    /// The job file: one JSON object per line, {"id": "line-1", "text": "…", "voice": "af_heart",
    /// "options": {"seed": 7, "speed": 1.1}}. F5 lines give "ref" (a recording) and "ref_text",
    /// or a store voice id. Options: seed, speed, nfe, cfg, sway, cross_fade, fix_duration,
    /// short_fix, lang, phonemes, word_timestamps, target_rms. Blank lines are skipped.
    pub jobs: PathBuf,
    /// Directory of the results: ID.wav and ID.json per utterance (created if absent).
    #[arg(long)]
    pub out: PathBuf,
    /// Do only shard I of N (I from 0): the lines whose line number minus one is I modulo N.
    /// N workers with 0/N … N-1/N together do every line exactly once.
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<Shard>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The voice of lines that name none (Kokoro default af_heart; F5: a store id or directory).
    #[arg(long)]
    pub voice: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
    /// No progress bar and no progress lines (errors and the summary still go to stderr).
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Which part of the job file one worker does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Whether the utterance on 0-based line `line` is this shard's.
    fn owns(&self, line: usize) -> bool {
        line % self.count == self.index
    }
}

fn parse_shard(s: &str) -> std::result::Result<Shard, String> {
    let bad = || format!("{s:?}: give the shard as I/N, I from 0 to N-1 (e.g. 0/4)");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let index: usize = i.trim().parse().map_err(|_| bad())?;
    let count: usize = n.trim().parse().map_err(|_| bad())?;
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

/// One line of the job file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobLine {
    id: String,
    text: String,
    #[serde(default)]
    voice: Option<String>,
    /// F5: the reference recording.
    #[serde(default, rename = "ref")]
    reference: Option<PathBuf>,
    /// F5: what the reference recording says.
    #[serde(default)]
    ref_text: Option<String>,
    #[serde(default)]
    options: LineOptions,
}

/// A line's synthesis options, as `f5 synth` names them (with `_` for `-`).
#[derive(Deserialize, Default, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct LineOptions {
    seed: Option<u64>,
    speed: Option<f64>,
    nfe: Option<usize>,
    cfg: Option<f32>,
    sway: Option<f32>,
    cross_fade: Option<f64>,
    fix_duration: Option<f64>,
    short_fix: Option<bool>,
    lang: Option<String>,
    phonemes: Option<bool>,
    word_timestamps: Option<bool>,
    target_rms: Option<f32>,
}

/// A checked line: where it is and what it asks.
struct Utterance {
    /// 1-based line number in the job file.
    line: usize,
    job: JobLine,
}

/// The ids `f5 batch` accepts: 1–128 of letters, digits, '_', '-' and '.', not starting with a
/// dot. They become file names in OUT, so no separator, no `..`, no hidden or temporary name.
fn valid_batch_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Reads and checks every line of the job file: JSON of the right shape, a valid id, unique
/// across the whole file, a non-empty text. The first problem is an error naming its line.
fn read_jobs(path: &Path) -> Result<Vec<Utterance>> {
    crate::limits::require_regular_file(path, "job file")?;
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let n = i + 1;
        let line = line.with_context(|| format!("{}:{n}: cannot read the line (is the file UTF-8 text?)", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let job: JobLine = serde_json::from_str(&line).with_context(|| format!("{}:{n}: not a job line", path.display()))?;
        if !valid_batch_id(&job.id) {
            bail!(
                "{}:{n}: invalid id {:?}: use 1–128 letters, digits, '_', '-' or '.', not starting with '.' (it names the output file)",
                path.display(),
                job.id.chars().take(80).collect::<String>()
            );
        }
        if let Some(first) = seen.insert(job.id.clone(), n) {
            bail!("{}:{n}: id {:?} is already used on line {first}; ids must be unique", path.display(), job.id);
        }
        if job.text.trim().is_empty() {
            bail!("{}:{n}: the text of {:?} is empty", path.display(), job.id);
        }
        if job.reference.is_some() != job.ref_text.is_some() {
            bail!("{}:{n}: \"ref\" and \"ref_text\" go together (the recording and what it says)", path.display());
        }
        if let Some(speed) = job.options.speed {
            if !(speed.is_finite() && speed > 0.0) {
                bail!("{}:{n}: speed must be above zero, got {speed}", path.display());
            }
        }
        out.push(Utterance { line: n, job });
    }
    if out.is_empty() {
        bail!("{}: no job lines", path.display());
    }
    Ok(out)
}

/// The seed of an utterance without one: FNV-1a of its id, so the same id always sounds the
/// same, whichever shard or rerun makes it.
fn seed_from_id(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)) & 0x7fff_ffff_ffff_ffff
}

/// `OUT/ID.wav` and `OUT/ID.json`.
fn outputs(out: &Path, id: &str) -> (PathBuf, PathBuf) {
    (out.join(format!("{id}.wav")), out.join(format!("{id}.json")))
}

/// Whether a previous run finished `id`: the report is renamed into place after the audio, so
/// both existing means both are whole.
fn finished(out: &Path, id: &str) -> bool {
    let (wav, json) = outputs(out, id);
    wav.is_file() && json.is_file()
}

/// Writes `bytes` to a temporary name beside `path` (`.NAME.partial`; ids never start with a
/// dot, so it is no output's name) and renames it into place: a reader sees the whole file or
/// none. One worker owns an id, so the temporary's name needs no process id, and one left by a
/// killed run is simply overwritten.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let tmp = path.with_file_name(format!(".{name}.partial"));
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

/// How progress is shown: a bar on a terminal, JSON lines on a pipe (a log collector, a
/// scheduler's output file), nothing with `-q`.
enum Reporter {
    Bar(indicatif::ProgressBar),
    Lines,
    Quiet,
}

impl Reporter {
    fn new(quiet: bool, total: usize, skipped: usize) -> Self {
        if quiet {
            return Reporter::Quiet;
        }
        if !std::io::stderr().is_terminal() {
            return Reporter::Lines;
        }
        let bar = indicatif::ProgressBar::new(total as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} utterances, {elapsed} (eta {eta})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_position(skipped as u64);
        Reporter::Bar(bar)
    }

    fn line(value: serde_json::Value) {
        let _ = writeln!(std::io::stderr().lock(), "{value}");
    }

    fn start(&self, total: usize, todo: usize, skipped: usize, shard: Option<Shard>) {
        if let Reporter::Lines = self {
            let shard = shard.map(|s| format!("{}/{}", s.index, s.count));
            Self::line(serde_json::json!({"event": "start", "shard": shard, "total": total, "todo": todo, "skipped": skipped}));
        }
    }

    fn done(&self, id: &str, line: usize, position: usize, total: usize, audio_seconds: f64, synth_seconds: f64) {
        match self {
            Reporter::Bar(b) => {
                b.set_message(id.to_string());
                b.inc(1);
            }
            Reporter::Lines => Self::line(serde_json::json!({
                "event": "done", "id": id, "line": line, "position": position, "total": total,
                "audio_seconds": audio_seconds, "synth_seconds": synth_seconds,
            })),
            Reporter::Quiet => {}
        }
    }

    fn failed(&self, id: &str, line: usize, error: &anyhow::Error) {
        let message = format!("{error:#}");
        match self {
            Reporter::Bar(b) => {
                b.println(format!("f5 batch: line {line} ({id}) failed: {message}"));
                b.inc(1);
            }
            Reporter::Lines => Self::line(serde_json::json!({"event": "failed", "id": id, "line": line, "error": message})),
            Reporter::Quiet => {
                let _ = writeln!(std::io::stderr().lock(), "f5 batch: line {line} ({id}) failed: {message}");
            }
        }
    }

    fn finish(self) {
        if let Reporter::Bar(b) = self {
            b.finish_and_clear();
        }
    }
}

/// Voices prepared once per batch: recordings by path and transcript (F5), names as they are.
struct Voices {
    recordings: HashMap<(PathBuf, String, u32), Arc<Voice>>,
}

impl Voices {
    fn for_line(&mut self, job: &JobLine, default: Option<&str>, engine: &dyn SpeechEngine) -> Result<VoiceRef> {
        let target_rms = job.options.target_rms.unwrap_or(0.1);
        if engine.info().clones_from_recording || job.reference.is_some() {
            let (audio, transcript) = match (&job.reference, &job.ref_text, job.voice.as_deref().or(default)) {
                (Some(wav), Some(text), _) => (wav.clone(), text.clone()),
                (None, _, Some(name)) => resolve::voice(name)?,
                _ => bail!("this model clones a voice: give \"ref\" and \"ref_text\", or \"voice\" (a store id or directory), or --voice"),
            };
            if !(target_rms.is_finite() && target_rms > 0.0 && target_rms <= 1.0) {
                bail!("target_rms must be in (0, 1], got {target_rms}");
            }
            let key = (audio.clone(), transcript.clone(), target_rms.to_bits());
            if let Some(v) = self.recordings.get(&key) {
                return Ok(VoiceRef::Recording(v.clone()));
            }
            // A recording whose speech the ≤ 12 s rule cuts is refused, as `f5 synth` refuses it
            // without a transcriber: the line fails alone, saying how much was kept.
            let voice = Voice::load(&audio, &transcript, target_rms)?;
            let voice = Arc::new(voice);
            self.recordings.insert(key, voice.clone());
            return Ok(VoiceRef::Recording(voice));
        }
        if job.options.target_rms.is_some() {
            bail!("target_rms applies to reference recordings; this model speaks in named voices");
        }
        Ok(VoiceRef::Named(job.voice.as_deref().or(default).unwrap_or(synth_cmd::DEFAULT_VOICE).to_string()))
    }
}

fn speak_options(o: &LineOptions, id: &str) -> SpeakOptions {
    let mut opts = SpeakOptions::default();
    opts.seed = Some(o.seed.unwrap_or_else(|| seed_from_id(id)));
    opts.speed = o.speed.unwrap_or(1.0);
    opts.nfe = o.nfe;
    opts.cfg = o.cfg;
    opts.sway = o.sway;
    opts.cross_fade = o.cross_fade;
    opts.fix_duration = o.fix_duration;
    opts.short_fix = o.short_fix.unwrap_or(false);
    opts.lang = o.lang.clone();
    opts.phonemes = o.phonemes.unwrap_or(false);
    opts.word_timestamps = o.word_timestamps.unwrap_or(false);
    opts
}

/// The options a line set, without the ones it left out.
fn set_options(o: &LineOptions) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(o)?;
    if let Some(map) = v.as_object_mut() {
        map.retain(|_, value| !value.is_null());
    }
    Ok(v)
}

/// Speaks one utterance and writes its wav, then its report.
fn run_one(engine: &dyn SpeechEngine, voices: &mut Voices, args: &BatchArgs, u: &Utterance, shard: Option<Shard>) -> Result<(f64, f64)> {
    let job = &u.job;
    let voice = voices.for_line(job, args.voice.as_deref(), engine)?;
    let opts = speak_options(&job.options, &job.id);
    let started = Instant::now();
    let audio = f5_synth::speak_to_memory(engine, &voice, &job.text, &opts, &mut |_| {})?;
    let synth_seconds = started.elapsed().as_secs_f64();
    let rate = engine.info().sample_rate;
    let mut samples = audio.samples;
    // 16 bits cannot hold a peak above full scale: the whole utterance is at hand, so it is
    // scaled down once instead of clipped (as `f5 synth` does when it writes a whole file).
    let peak = f5_audio::level::peak(&samples);
    if peak > 1.0 {
        f5_audio::level::limit_peak(&mut samples, 1.0);
    }
    let wav = f5_audio::encode::encode_whole(f5_audio::encode::AudioFormat::Wav, &samples, rate, 1)?;
    let (wav_path, json_path) = outputs(&args.out, &job.id);
    write_atomic(&wav_path, &wav)?;
    let audio_seconds = samples.len() as f64 / f64::from(rate);
    let mut report = serde_json::json!({
        "id": job.id,
        "line": u.line,
        "shard": shard.map(|s| format!("{}/{}", s.index, s.count)),
        "text": job.text,
        "voice": job.voice.as_deref().or(args.voice.as_deref()),
        "ref": job.reference,
        "model": args.model.name,
        "family": engine.info().family,
        "options": set_options(&job.options)?,
        "seed": audio.seed,
        "samples": samples.len(),
        "sample_rate": rate,
        "audio_seconds": audio_seconds,
        "synth_seconds": synth_seconds,
        "peak_scaled_from": (peak > 1.0).then_some(peak),
        "chunks": audio.chunks.iter().map(|c| serde_json::json!({"text": c.text, "samples": c.samples, "synth_seconds": c.seconds})).collect::<Vec<_>>(),
        "wav": wav_path.file_name().and_then(|n| n.to_str()),
    });
    if opts.word_timestamps {
        report["words"] = serde_json::to_value(&audio.words)?;
    }
    write_atomic(&json_path, format!("{}\n", serde_json::to_string_pretty(&report)?).as_bytes())?;
    Ok((audio_seconds, synth_seconds))
}

pub fn run(args: BatchArgs) -> Result<()> {
    let all = read_jobs(&args.jobs)?;
    let shard = args.shard;
    let mine: Vec<&Utterance> = all.iter().filter(|u| shard.is_none_or(|s| s.owns(u.line - 1))).collect();
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let todo: Vec<&Utterance> = mine.iter().copied().filter(|u| !finished(&args.out, &u.job.id)).collect();
    let skipped = mine.len() - todo.len();
    let reporter = Reporter::new(args.quiet, mine.len(), skipped);
    reporter.start(mine.len(), todo.len(), skipped, shard);
    let started = Instant::now();
    let mut failed: Vec<String> = Vec::new();
    if !todo.is_empty() {
        let hub = Arc::new(resolve::hub(args.quiet));
        let files = args.model.files(&hub)?;
        // Named voices are checked before the model loads: a typo fails at once, naming its line.
        if !files.clones_from_recording() {
            for u in &todo {
                if u.job.reference.is_none() {
                    let name = u.job.voice.as_deref().or(args.voice.as_deref()).unwrap_or(synth_cmd::DEFAULT_VOICE);
                    files.check_voice_name(name).with_context(|| format!("{}:{}: voice {name:?}", args.jobs.display(), u.line))?;
                }
            }
        }
        let engine = args.run.open(&files)?;
        let engine: &dyn SpeechEngine = &*engine;
        let mut voices = Voices { recordings: HashMap::new() };
        for (k, u) in todo.iter().enumerate() {
            match run_one(engine, &mut voices, &args, u, shard) {
                Ok((audio_seconds, synth_seconds)) => {
                    reporter.done(&u.job.id, u.line, skipped + k + 1, mine.len(), audio_seconds, synth_seconds);
                }
                Err(e) => {
                    reporter.failed(&u.job.id, u.line, &e);
                    failed.push(format!("{} (line {})", u.job.id, u.line));
                }
            }
        }
    }
    reporter.finish();
    let done = todo.len() - failed.len();
    let summary = serde_json::json!({
        "event": "finished", "shard": shard.map(|s| format!("{}/{}", s.index, s.count)),
        "total": mine.len(), "done": done, "skipped": skipped, "failed": failed.len(),
        "seconds": started.elapsed().as_secs_f64(),
    });
    let _ = writeln!(std::io::stderr().lock(), "{summary}");
    if !failed.is_empty() {
        let shown: Vec<&str> = failed.iter().take(5).map(String::as_str).collect();
        let more = if failed.len() > 5 { format!(" and {} more", failed.len() - 5) } else { String::new() };
        bail!("{} of {} utterances failed: {}{more}; run again to retry them", failed.len(), mine.len(), shown.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_parsed_and_cover_every_line_once() {
        assert_eq!(parse_shard("1/3"), Ok(Shard { index: 1, count: 3 }));
        for bad in ["3/3", "0/0", "1", "a/2", "-1/2", "1/2/3"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
        let shards: Vec<Shard> = (0..3).map(|i| Shard { index: i, count: 3 }).collect();
        for line in 0..40 {
            assert_eq!(shards.iter().filter(|s| s.owns(line)).count(), 1, "line {line}");
        }
    }

    #[test]
    fn ids_that_name_other_files_are_refused() {
        for bad in ["", ".hidden", "..", "a/b", "a\\b", "a b", "ä", &"x".repeat(129)] {
            assert!(!valid_batch_id(bad), "{bad:?}");
        }
        for good in ["line-1", "chapter_2.part.3", &"x".repeat(128)] {
            assert!(valid_batch_id(good), "{good:?}");
        }
    }

    #[test]
    fn the_derived_seed_depends_on_the_id_only() {
        assert_eq!(seed_from_id("a"), seed_from_id("a"));
        assert_ne!(seed_from_id("a"), seed_from_id("b"));
    }
}
