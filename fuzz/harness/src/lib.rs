//! What each fuzz target does with the bytes it is given, as plain functions.
//!
//! The libFuzzer targets in `fuzz/fuzz_targets/` are one line each around these, and the stable
//! test suite (`xtask/tests/fuzz_corpus.rs`) replays every committed corpus file through the same
//! functions, so CI exercises the corpora without a nightly toolchain.
//!
//! Each function feeds untrusted bytes to a public entry point the way a user's file or request
//! reaches it. A returned error is a correct answer; a panic, an abort, a hang or an allocation
//! past libFuzzer's memory limit is a bug. Beyond "no panic", the functions assert the promises
//! the entry points document (a decoded file within its limit, a chunk within 510 phonemes, a
//! reference that prints back to itself), so a broken promise shows up as a crash too.

use std::io::{Cursor, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use f5_audio::decode::{decode_bytes_limited, DecodeLimit};
use f5_g2p::{G2p, MAX_PHONEMES};
use f5_kokoro::voice::{parse_voice_mix, VoicePack};
use f5_torchpt::Checkpoint;

/// What a target does with one input.
pub type Harness = fn(&[u8]);

/// Every target: its name (the file name under `fuzz/fuzz_targets/` and the seed folder under
/// `fuzz/seeds/`) and the function it runs.
pub const TARGETS: &[(&str, Harness)] = &[
    ("torch_checkpoint", torch_checkpoint),
    ("torch_pickle", torch_pickle),
    ("safetensors_header", safetensors_header),
    ("audio_decode", audio_decode),
    ("text_front_end", text_front_end),
    ("g2p_english", g2p_english),
    ("kokoro_voice_mix", kokoro_voice_mix),
    ("kokoro_voice_pack", kokoro_voice_pack),
    ("hub_reference", hub_reference),
];

/// A whole checkpoint file (safetensors or torch zip) as `f5-torchpt` opens it, then every
/// tensor read back the three ways a loader reads them.
pub fn torch_checkpoint(data: &[u8]) {
    read_every_tensor(Checkpoint::from_bytes("fuzz-input", data.to_vec()));
}

/// Storage records the pickle target puts beside its `data.pkl`: keys `0`–`7`, as torch names
/// them, each 1 KiB of a repeating pattern, so a fuzzed pickle can point tensors at real bytes.
const PICKLE_STORAGES: usize = 8;
const PICKLE_STORAGE_BYTES: usize = 1024;

/// The bytes as the `data.pkl` of an otherwise well-formed `torch.save` archive: reaches the
/// unpickler and the tensor table directly instead of through the zip container's checks.
pub fn torch_pickle(data: &[u8]) {
    let Ok(archive) = torch_zip_around(data) else { return };
    read_every_tensor(Checkpoint::from_bytes("fuzz-input.pt", archive));
}

/// A torch archive (`archive/data.pkl`, `archive/byteorder`, `archive/data/N`) around a pickle.
pub fn torch_zip_around(pickle: &[u8]) -> zip::result::ZipResult<Vec<u8>> {
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zip.start_file("archive/data.pkl", stored)?;
    zip.write_all(pickle)?;
    zip.start_file("archive/byteorder", stored)?;
    zip.write_all(b"little")?;
    for key in 0..PICKLE_STORAGES {
        zip.start_file(format!("archive/data/{key}"), stored)?;
        let pattern: Vec<u8> = (0..PICKLE_STORAGE_BYTES).map(|i| (i * 7 + key) as u8).collect();
        zip.write_all(&pattern)?;
    }
    zip.start_file("archive/version", stored)?;
    zip.write_all(b"3\n")?;
    Ok(zip.finish()?.into_inner())
}

/// The bytes as the JSON header of a safetensors file. The first two bytes (little-endian) say
/// how many data bytes follow the header, so the fuzzer can match the offsets it writes.
pub fn safetensors_header(data: &[u8]) {
    let Some((len, header)) = data.split_first_chunk::<2>() else { return };
    let data_len = usize::from(u16::from_le_bytes(*len));
    let mut file = Vec::with_capacity(8 + header.len() + data_len);
    file.extend_from_slice(&(header.len() as u64).to_le_bytes());
    file.extend_from_slice(header);
    file.extend((0..data_len).map(|i| i as u8));
    read_every_tensor(Checkpoint::from_bytes("fuzz-input.safetensors", file));
}

fn read_every_tensor(opened: f5_torchpt::Result<Checkpoint>) {
    let ckpt = match opened {
        Ok(ckpt) => ckpt,
        Err(e) => {
            // Every error must be printable (the CLI prints it); formatting must not panic.
            let _ = e.to_string();
            return;
        }
    };
    let names: Vec<String> = ckpt.names().map(str::to_owned).collect();
    for name in &names {
        let info = ckpt.meta(name).expect("a listed name has a layout");
        let numel = info.numel();
        if let Ok(raw) = ckpt.raw_bytes(name) {
            assert_eq!(raw.len(), numel * info.dtype().size_bytes(), "{name}: raw bytes of a contiguous tensor are numel × element size");
        }
        if let Ok(values) = ckpt.read_f32(name) {
            assert_eq!(values.len(), numel, "{name}: read_f32 gives one value per element");
        }
        if let Ok(view) = ckpt.f32_view(name) {
            assert_eq!(view.len(), numel, "{name}: f32_view gives one value per element");
        }
    }
    for (name, scalar) in ckpt.scalars() {
        let _ = format!("{name} = {scalar:?}");
    }
}

/// The format hint a decode is given, chosen by the input's first byte: none, the four
/// formats a user uploads, and one no decoder knows.
const AUDIO_HINTS: [Option<&str>; 6] = [None, Some("wav"), Some("flac"), Some("mp3"), Some("ogg"), Some("txt")];

/// Audio as an uploaded voice reaches the decoder: the first byte picks the extension hint, the
/// rest is the file, decoded under the reference limit (what `POST /voices` and `--ref` use).
pub fn audio_decode(data: &[u8]) {
    let Some((&pick, file)) = data.split_first() else { return };
    let hint = AUDIO_HINTS[usize::from(pick) % AUDIO_HINTS.len()];
    let limit = DecodeLimit::REFERENCE;
    match decode_bytes_limited(file, "fuzz input", hint, limit) {
        Ok(decoded) => {
            let audio = &decoded.audio;
            let samples: u64 = audio.channels.iter().map(|c| c.len() as u64).sum();
            assert!(samples <= limit.max_samples, "{samples} samples decoded past the {}-sample limit", limit.max_samples);
            let seconds = audio.len() as f64 / f64::from(audio.sample_rate.max(1));
            // One packet past the time limit may be decoded before the cut is seen.
            assert!(seconds <= limit.max_seconds + 1.0, "{seconds} s decoded past the {} s limit", limit.max_seconds);
            let _ = audio.to_mono();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// F5's text front end on any UTF-8: tokens (jieba + pinyin), sentences, chunks, vocabulary ids.
pub fn text_front_end(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let tokens = f5_text::to_tokens(text);
    let _ = f5_text::lazy_pinyin_tone3(text);
    let _ = f5_text::split_sentences(text);
    // The CLI's default budget and a tiny one that forces a chunk per sentence.
    for max_bytes in [135, 1] {
        for chunk in f5_text::chunk_text(text, max_bytes) {
            let _ = f5_text::to_tokens(&chunk);
        }
    }
    // The text as a vocab.txt, and the tokens looked up in it.
    let vocab = f5_text::Vocab::from_text(text);
    if let Ok(tokens) = tokens {
        let ids = vocab.ids(&tokens);
        assert_eq!(ids.len(), tokens.len(), "one id per token");
    }
}

/// American and British English front ends without espeak-ng (unknown words stay silent), built
/// once per process: loading the lexicons takes far longer than one input.
fn english() -> &'static [G2p; 2] {
    static G2PS: OnceLock<[G2p; 2]> = OnceLock::new();
    G2PS.get_or_init(|| {
        let us = G2p::english(false, None).expect("built-in American lexicon");
        let gb = G2p::english(true, None).expect("built-in British lexicon");
        [us, gb]
    })
}

/// Kokoro's English front end: the first byte picks en-US or en-GB, the rest is the text.
pub fn g2p_english(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let g2p = &english()[usize::from(pick & 1)];
    let Ok(chunks) = g2p.chunks(text) else { return };
    for chunk in chunks {
        let n = chunk.phonemes.chars().count();
        assert!(n <= MAX_PHONEMES, "a chunk of {n} phonemes (the model takes at most {MAX_PHONEMES})");
        assert!(n > 0, "an empty chunk was not skipped");
    }
}

/// A voice request such as `af_bella(2)+af_sky`, as the CLI and server take it.
pub fn kokoro_voice_mix(data: &[u8]) {
    let Ok(spec) = std::str::from_utf8(data) else { return };
    if let Ok(parts) = parse_voice_mix(spec) {
        assert!(!parts.is_empty(), "a parsed mix names a voice");
        for (name, weight) in parts {
            assert!(!name.is_empty() && !name.contains(['/', '\\', '.']), "voice name {name:?} could leave the voices folder");
            assert!(weight.is_finite() && weight > 0.0, "weight {weight}");
        }
    }
}

/// A voice pack file: the first byte picks `.pt` (torch) or `.bin` (raw f32) and the style
/// width (Kokoro's 256, or 8 so that small inputs make whole rows); the rest is the file.
pub fn kokoro_voice_pack(data: &[u8]) {
    let Some((&pick, file)) = data.split_first() else { return };
    let ext = if pick & 1 == 1 { "pt" } else { "bin" };
    let dim = if pick & 2 == 2 { 256 } else { 8 };
    let path = scratch_path(ext);
    if std::fs::write(&path, file).is_err() {
        return;
    }
    let opened = VoicePack::open(&path, dim);
    let _ = std::fs::remove_file(&path);
    let pack = match opened {
        Ok(pack) => pack,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let rows = pack.rows();
    assert!(rows >= 1, "an opened pack has a row");
    assert_eq!(pack.style(1).map(<[f32]>::len).ok(), Some(dim), "row 1 is {dim} wide");
    assert!(pack.style(rows).is_ok(), "the last row ({rows}) is there");
    assert!(pack.style(0).is_err() && pack.style(rows + 1).is_err(), "styles exist for 1..={rows} phonemes only");
    let mixed = VoicePack::mix(&[(pack.clone(), 1.0), (pack, 2.0)]).expect("a pack mixes with itself");
    assert_eq!(mixed.rows(), rows);
}

/// A file of this process's own under the temporary directory (the pack reader takes a path).
fn scratch_path(ext: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("f5-fuzz-voice-{}-{n}.{ext}", std::process::id()))
}

/// A hub model reference (`owner/repo/path@revision`); after a newline, a path to join onto it.
pub fn hub_reference(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (name, other) = text.split_once('\n').unwrap_or((text, "config.json"));
    if f5_hub::is_valid_id(name) {
        assert!(!name.contains(['/', '\\', '.']), "local id {name:?} could leave the store");
    }
    let Ok(reference) = f5_hub::Reference::parse(name) else { return };
    check_reference(&reference);
    let shown = reference.to_string();
    let reparsed = f5_hub::Reference::parse(&shown);
    assert_eq!(reparsed.as_ref().ok(), Some(&reference), "{name:?} prints as {shown:?}, which reads back differently");
    for joined in [reference.with_path(other), reference.sibling(other)].into_iter().flatten() {
        check_reference(&joined);
    }
}

/// What the cache relies on: no part of a reference can climb out of its folder.
fn check_reference(r: &f5_hub::Reference) {
    for part in [&r.owner, &r.repo] {
        assert!(!part.is_empty() && !part.contains(['/', '\\']) && !part.contains(".."), "repository part {part:?}");
    }
    for component in r.path.split('/').chain(r.revision.split('/')) {
        assert!(component != ".." && component != "." && !component.contains('\\'), "path component {component:?} in {r:?}");
    }
}
