//! `f5 chunks`: the chunks an F5 synthesis of a text generates one at a time. The byte budget
//! of a chunk depends on the reference (its length and its transcript's), so given the same
//! voice options as `f5 synth` this prints exactly the chunks synthesis makes; without them it
//! uses `--max` and says so.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use f5_synth::Voice;

use crate::{resolve, synth_cmd};

/// The reference implementation's chunk budget when nothing else is known.
const DEFAULT_MAX_BYTES: usize = 135;

#[derive(Args)]
pub struct ChunksArgs {
    /// A UTF-8 text file ("-" for standard input).
    file: PathBuf,
    /// Byte budget per chunk, when no reference is given (default 135).
    #[arg(long = "max", conflicts_with_all = ["voice", "reference"])]
    max_bytes: Option<usize>,
    /// The F5 voice synthesis would use: an id in the voice store or a voice directory (as
    /// `f5 synth --voice`); the budget follows from its recording and transcript.
    #[arg(long, conflicts_with_all = ["reference", "reference_text"])]
    voice: Option<String>,
    /// The F5 reference recording synthesis would use (as `f5 synth --ref`).
    #[arg(long = "ref", requires = "reference_text")]
    reference: Option<PathBuf>,
    /// What the reference recording says (as `f5 synth --ref-text`).
    #[arg(long = "ref-text")]
    reference_text: Option<String>,
    /// Speaking rate, as `f5 synth --speed` (a faster rate fits more text into a chunk).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// As `f5 synth --short-fix`: one-word openings become chunks of their own.
    #[arg(long = "short-fix")]
    short_fix: bool,
}

/// Where a budget came from, for the summary line.
struct Budget {
    bytes: usize,
    from: String,
}

fn budget_of(voice: &Voice, what: &str, speed: f64) -> Budget {
    Budget {
        bytes: voice.max_chunk_bytes(speed),
        from: format!("{what}: {:.2} s of reference, transcript {} bytes, speed {speed}", voice.clip_seconds, voice.fixed_transcript.len()),
    }
}

pub fn run(args: ChunksArgs) -> Result<()> {
    if !(args.speed.is_finite() && args.speed > 0.0) {
        bail!("--speed must be a positive number, got {}", args.speed);
    }
    let text = crate::read_text(&args.file)?;
    let main = match (&args.voice, &args.reference, &args.reference_text) {
        (Some(name), _, _) => {
            let (audio, transcript) = resolve::voice(name)?;
            budget_of(&Voice::load(&audio, &transcript, f5_audio::level::TARGET_RMS)?, &format!("voice {name}"), args.speed)
        }
        (None, Some(wav), Some(t)) => budget_of(&Voice::load(wav, t, f5_audio::level::TARGET_RMS)?, &wav.display().to_string(), args.speed),
        _ => {
            let bytes = args.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
            let from = match args.max_bytes {
                Some(_) => "--max".to_string(),
                None => {
                    "the default; synthesis budgets by the reference: give --voice or --ref/--ref-text for its exact chunks".to_string()
                }
            };
            Budget { bytes, from }
        }
    };
    if main.bytes == 0 {
        bail!("--max must be at least 1");
    }
    let pieces = synth_cmd::voice_pieces(&text);
    let tagged = pieces.iter().any(|(name, _)| name.is_some());
    let mut count = 0;
    let mut out = String::new();
    let mut budgets = Vec::new();
    for (name, piece) in &pieces {
        let (label, budget) = match name.as_deref() {
            Some(n) if n != "main" => {
                let (audio, transcript) = resolve::voice(n).map_err(|e| anyhow::anyhow!("voice [{n}] in the text: {e:#}"))?;
                (
                    format!("[{n}] "),
                    budget_of(&Voice::load(&audio, &transcript, f5_audio::level::TARGET_RMS)?, &format!("[{n}]"), args.speed),
                )
            }
            Some(_) => ("[main] ".to_string(), Budget { bytes: main.bytes, from: String::new() }),
            None => (if tagged { "[main] ".to_string() } else { String::new() }, Budget { bytes: main.bytes, from: String::new() }),
        };
        let mut chunks = f5_text::chunk_text(piece, budget.bytes);
        if args.short_fix {
            chunks = f5_synth::short_fix::split_one_word_openings(chunks);
        }
        for chunk in chunks {
            out.push_str(&label);
            out.push_str(&chunk);
            out.push('\n');
            count += 1;
        }
        if !budget.from.is_empty() {
            budgets.push(format!("{} bytes for {}", budget.bytes, budget.from));
        }
    }
    print!("{out}");
    eprintln!(
        "{count} chunk{}; budget {} bytes ({}){}",
        if count == 1 { "" } else { "s" },
        main.bytes,
        main.from,
        if budgets.is_empty() { String::new() } else { format!("; {}", budgets.join("; ")) }
    );
    Ok(())
}
