//! Encoding speed of each output format on the speech fixture repeated to one minute at 24 kHz:
//! `cargo run --release -p f5-audio --example encode_speed`. Prints the best of three runs per
//! format as seconds of audio encoded per second of one CPU core.

use std::path::Path;
use std::time::Instant;

use f5_audio::encode::{encode_whole, AudioFormat};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rate = 24_000u32;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/audio/ref_48000.wav");
    let speech = f5_audio::resample(&f5_audio::decode_file(&path)?.to_mono(), 48_000, rate)?;
    let seconds = 60usize;
    let audio: Vec<f32> = speech.iter().copied().cycle().take(seconds * rate as usize).collect();
    println!("{seconds} s of speech at {rate} Hz, mono; best of 3 runs");
    for format in AudioFormat::ALL {
        let mut best = f64::MAX;
        let mut bytes = 0;
        for _ in 0..3 {
            let start = Instant::now();
            bytes = encode_whole(format, &audio, rate, 1)?.len();
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!("{format:>5}: {:8.1} ms  {:7.0}x real time  {:8} bytes", best * 1e3, seconds as f64 / best, bytes);
    }
    Ok(())
}
