//! Vocos and its inverse STFT against the reference implementation.
//!
//! Goldens: `fixtures/goldens/vocos_{tiny,full}_decode.npy` (`vocos.decode(mel.T[None])[0]` on
//! `mel_22050.npy`, see `fixtures/goldens/index.json`), and, written by `tests/data/make.py`,
//! `tests/data/istft_*.npy` (`torch.istft` on random Vocos-like spectra) and
//! `tests/data/vocos_tiny_t{2,5}.npy` (`vocos.decode` of the first frames of the same mel).
//!
//! Tolerances, all rel-L2:
//! - iSTFT alone ≤ 1e-6: the only differences from torch are the FFT algorithm's f32 rounding
//!   (~1e-7 relative); every inverse-STFT bug class below moves the result by > 1e-3;
//! - whole decodes ≤ 1e-5: on top of that, the network sums in a different order in f32 and
//!   uses different exp/erf/sin/cos approximations (each ~1e-7 relative), and phases of a few
//!   radians turn those into ~1e-6 of the waveform; a wrong formula is off by far more.
//!
//! The bug-class tests build deliberately wrong inverses (constant envelope 1.5, DC/Nyquist
//! doubled) with an independent, direct inverse DFT and check that the goldens reject them:
//! proof that the goldens can tell, not only that the code agrees with them.

use std::path::{Path, PathBuf};

use f5_gpukit::CpuBackend;
use f5_vocos::{istft, HopSource, IstftPlan, Vocos, VocosError};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn npy(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(&bytes[..]).unwrap().into_vec::<f32>().unwrap()
}

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "length");
    let num: f64 = got.iter().zip(want).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

#[track_caller]
fn check(what: &str, got: &[f32], want: &[f32], tol: f64) {
    let e = rel_l2(got, want);
    eprintln!("{what}: rel-L2 {e:.2e}");
    assert!(e <= tol, "{what}: rel-L2 {e:.3e} > {tol:e}");
}

/// The log-mel fed to both reference decodes, `[179, 100]`.
fn golden_mel() -> (Vec<f32>, usize) {
    let mel = npy(&fixtures().join("goldens/mel_22050.npy"));
    let frames = mel.len() / 100;
    assert_eq!(frames, 179);
    (mel, frames)
}

// ── inverse STFT cases ────────────────────────────────────────────────────────────────────

/// (n_fft, hop, frames) as written by make.py.
const CASES: [(usize, usize, usize); 6] = [(1024, 256, 2), (1024, 256, 7), (16, 4, 9), (64, 16, 32), (24, 6, 5), (32, 12, 6)];

struct Case {
    name: String,
    n_fft: usize,
    hop: usize,
    frames: usize,
    re: Vec<f32>,
    im: Vec<f32>,
    out: Vec<f32>,
}

fn cases() -> Vec<Case> {
    CASES
        .iter()
        .map(|&(n_fft, hop, frames)| {
            let name = format!("istft_n{n_fft}_h{hop}_t{frames}");
            let load = |part: &str| npy(&data().join(format!("{name}_{part}.npy")));
            Case { n_fft, hop, frames, re: load("re"), im: load("im"), out: load("out"), name }
        })
        .collect()
}

/// How a hand-written inverse may treat the envelope and the unpaired bins.
#[derive(Clone, Copy, PartialEq)]
enum Envelope {
    OverlapAddedSquares,
    /// The interior value of Σw² for hop = n_fft/4 used everywhere.
    Constant1p5,
}

#[derive(Clone, Copy, PartialEq)]
enum EdgeBins {
    Once,
    Doubled,
}

/// A direct inverse DFT + overlap-add, independent of realfft and of the crate, with the two
/// bug classes switchable.
fn reference_istft(re: &[f32], im: &[f32], frames: usize, n_fft: usize, hop: usize, env: Envelope, edge: EdgeBins) -> Vec<f32> {
    let bins = n_fft / 2 + 1;
    let w: Vec<f64> = (0..n_fft).map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n_fft as f64).cos()).collect();
    let (cos, sin): (Vec<f64>, Vec<f64>) =
        (0..n_fft).map(|i| 2.0 * std::f64::consts::PI * i as f64 / n_fft as f64).map(|a| (a.cos(), a.sin())).unzip();
    let full = n_fft + hop * (frames - 1);
    let mut acc = vec![0f64; full];
    let mut wsum = vec![0f64; full];
    for t in 0..frames {
        let (r, i) = (&re[t * bins..(t + 1) * bins], &im[t * bins..(t + 1) * bins]);
        for n in 0..n_fft {
            let edge_weight = if edge == EdgeBins::Once { 1.0 } else { 2.0 };
            let mut x = edge_weight * (r[0] as f64 + if n % 2 == 0 { 1.0 } else { -1.0 } * r[bins - 1] as f64);
            for k in 1..bins - 1 {
                let j = (k * n) % n_fft;
                x += 2.0 * (r[k] as f64 * cos[j] - i[k] as f64 * sin[j]);
            }
            acc[t * hop + n] += x / n_fft as f64 * w[n];
            wsum[t * hop + n] += w[n] * w[n];
        }
    }
    let pad = n_fft / 2;
    (pad..pad + hop * (frames - 1))
        .map(|n| {
            let e = if env == Envelope::Constant1p5 { 1.5 } else { wsum[n] };
            (acc[n] / e) as f32
        })
        .collect()
}

#[test]
fn istft_matches_torch() {
    for c in cases() {
        let got = istft(&c.re, &c.im, c.frames, c.n_fft, c.hop).unwrap();
        assert_eq!(got.len(), c.hop * (c.frames - 1), "{}: length", c.name);
        check(&c.name, &got, &c.out, 1e-6);
        // A reused plan gives the same samples as a fresh one.
        let plan = IstftPlan::new(c.n_fft, c.hop).unwrap();
        let mut out = vec![7.0; 3];
        plan.process_into(&c.re, &c.im, c.frames, &mut out).unwrap();
        assert_eq!(out, got, "{}: plan reuse", c.name);
    }
}

#[test]
fn goldens_reject_the_istft_bug_classes() {
    for c in cases().into_iter().filter(|c| c.n_fft == 4 * c.hop) {
        let run = |env, edge| reference_istft(&c.re, &c.im, c.frames, c.n_fft, c.hop, env, edge);
        // The harness itself, with both switches right, reproduces torch.
        check(&format!("{} direct DFT", c.name), &run(Envelope::OverlapAddedSquares, EdgeBins::Once), &c.out, 1e-5);
        for (what, env, edge) in [
            ("constant envelope", Envelope::Constant1p5, EdgeBins::Once),
            ("doubled DC/Nyquist", Envelope::OverlapAddedSquares, EdgeBins::Doubled),
        ] {
            let e = rel_l2(&run(env, edge), &c.out);
            eprintln!("{} {what}: rel-L2 {e:.2e}", c.name);
            assert!(e > 1e-3, "{} {what}: the golden cannot tell (rel-L2 {e:.2e})", c.name);
        }
    }
}

#[test]
fn constant_envelope_is_wrong_only_at_the_edges() {
    let c = cases().into_iter().find(|c| c.name == "istft_n1024_h256_t7").unwrap();
    let right = reference_istft(&c.re, &c.im, c.frames, c.n_fft, c.hop, Envelope::OverlapAddedSquares, EdgeBins::Once);
    let wrong = reference_istft(&c.re, &c.im, c.frames, c.n_fft, c.hop, Envelope::Constant1p5, EdgeBins::Once);
    let scale = right.iter().fold(0f32, |m, v| m.max(v.abs()));
    // Kept samples within n_fft/2 − hop of either end see one window fewer than the interior.
    let edge = c.n_fft / 2 - c.hop;
    let len = right.len();
    let gap = |range: std::ops::Range<usize>| range.map(|i| (right[i] - wrong[i]).abs()).fold(0f32, f32::max) / scale;
    let interior = gap(edge..len - edge);
    let (head, tail) = (gap(0..edge), gap(len - edge..len));
    eprintln!("constant envelope: interior {interior:.1e}, head {head:.1e}, tail {tail:.1e} (of peak)");
    assert!(interior < 1e-6, "interior differs by {interior:e} of peak");
    assert!(head > 1e-2 && tail > 1e-2, "edges agree ({head:e}, {tail:e}): the test cannot see the envelope");
}

/// Perfect reconstruction: a centred STFT (reflect padding, periodic Hann) followed by the
/// inverse gives the signal back, whatever the signal and length (longer than n_fft/2, which
/// reflect padding needs). Independent of torch.
mod round_trip {
    use proptest::prelude::*;
    use realfft::RealFftPlanner;

    fn stft(x: &[f32], n_fft: usize, hop: usize) -> (Vec<f32>, Vec<f32>, usize) {
        let pad = n_fft / 2;
        let reflect = |i: isize| -> f32 {
            let n = x.len() as isize;
            let j = if i < 0 {
                -i
            } else if i >= n {
                2 * (n - 1) - i
            } else {
                i
            };
            x[j as usize]
        };
        let frames = x.len() / hop + 1;
        let w = f5_vocos::hann_periodic(n_fft);
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(n_fft);
        let (mut re, mut im) = (Vec::new(), Vec::new());
        for t in 0..frames {
            let mut buf: Vec<f32> = (0..n_fft).map(|n| reflect((t * hop + n) as isize - pad as isize) * w[n]).collect();
            let mut spec = fft.make_output_vec();
            fft.process(&mut buf, &mut spec).unwrap();
            re.extend(spec.iter().map(|c| c.re));
            im.extend(spec.iter().map(|c| c.im));
        }
        (re, im, frames)
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(64) })]
        #[test]
        fn stft_then_istft_is_identity(frames in 4usize..40, seed in any::<u64>()) {
            let (n_fft, hop) = (16, 4);
            let mut state = seed | 1;
            let x: Vec<f32> = (0..hop * (frames - 1))
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect();
            let (re, im, t) = stft(&x, n_fft, hop);
            prop_assert_eq!(t, frames);
            let y = f5_vocos::istft(&re, &im, t, n_fft, hop).unwrap();
            let e = super::rel_l2(&y, &x);
            prop_assert!(e < 1e-5, "rel-L2 {}", e);
        }
    }
}

// ── whole decodes ─────────────────────────────────────────────────────────────────────────

#[test]
fn tiny_decode_matches_reference() {
    let vocos = Vocos::open(fixtures().join("models/vocos-tiny"), CpuBackend::new()).unwrap();
    let c = vocos.config();
    assert_eq!((c.mel_channels, c.dim, c.intermediate, c.layers), (100, 64, 192, 2));
    assert_eq!((c.n_fft, c.hop, c.sample_rate, c.layer_scale), (1024, 256, 24_000, true));
    assert_eq!(c.hop_source, HopSource::Yaml(fixtures().join("models/vocos-tiny/config.yaml")));
    assert_eq!(c.prefix, "");
    let (mel, frames) = golden_mel();
    let want = npy(&fixtures().join("goldens/vocos_tiny_decode.npy"));
    let got = vocos.decode(&mel, frames).unwrap();
    assert_eq!(got.len(), 45_568);
    assert_eq!(got.len(), vocos.output_len(frames));
    check("vocos-tiny decode", &got, &want, 1e-5);

    // The same bug classes, on the real head's spectrum, against the real decode golden.
    let s = vocos.spectrum(&mel, frames).unwrap();
    for (what, env, edge, rejected) in [
        ("right", Envelope::OverlapAddedSquares, EdgeBins::Once, false),
        ("constant envelope", Envelope::Constant1p5, EdgeBins::Once, true),
        ("doubled DC/Nyquist", Envelope::OverlapAddedSquares, EdgeBins::Doubled, true),
    ] {
        let e = rel_l2(&reference_istft(&s.re, &s.im, s.frames, c.n_fft, c.hop, env, edge), &want);
        eprintln!("vocos-tiny with {what} inverse: rel-L2 {e:.2e}");
        if rejected {
            assert!(e > 1e-3, "{what}: the decode golden cannot tell (rel-L2 {e:.2e})");
        } else {
            assert!(e <= 1e-5, "{what}: rel-L2 {e:.2e}");
        }
    }
}

#[test]
fn shortest_inputs_match_reference() {
    // 2 frames (the minimum) and 5 (shorter than the 7-tap kernels): zero padding covers most
    // of every convolution window, and every kept sample is an edge sample of the iSTFT.
    let vocos = Vocos::open(fixtures().join("models/vocos-tiny"), CpuBackend::new()).unwrap();
    let (mel, _) = golden_mel();
    for frames in [2, 5] {
        let got = vocos.decode(&mel[..frames * 100], frames).unwrap();
        check(&format!("vocos-tiny decode of {frames} frames"), &got, &npy(&data().join(format!("vocos_tiny_t{frames}.npy"))), 1e-5);
    }
}

#[test]
fn full_size_decode_matches_reference() {
    // Random weights of charactr's size (54 MB): kept out of the repository, so CI skips this.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/refmodels/vocos-full");
    if !dir.join("pytorch_model.bin").is_file() {
        eprintln!("skipped: {} is absent", dir.display());
        return;
    }
    let vocos = Vocos::open(&dir, CpuBackend::new()).unwrap();
    let c = vocos.config();
    assert_eq!((c.mel_channels, c.dim, c.intermediate, c.layers, c.n_fft, c.hop), (100, 512, 1536, 8, 1024, 256));
    assert_eq!(c.params, 13_531_650);
    let (mel, frames) = golden_mel();
    let got = vocos.decode(&mel, frames).unwrap();
    assert_eq!(got.len(), 45_568);
    check("vocos-full decode", &got, &npy(&fixtures().join("goldens/vocos_full_decode.npy")), 1e-5);
}

// ── other key styles and missing config ───────────────────────────────────────────────────

/// A scratch directory of this test process, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("f5-vocos-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The tiny checkpoint's tensors, renamed with `prefix`, as a safetensors file.
fn write_prefixed_safetensors(path: &Path, prefix: &str) {
    let ckpt = f5_torchpt::Checkpoint::open(fixtures().join("models/vocos-tiny/pytorch_model.bin")).unwrap();
    let mut header = Vec::new();
    let mut body = Vec::new();
    for name in ckpt.names() {
        let values = ckpt.read_f32(name).unwrap();
        let start = body.len();
        body.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        let shape: Vec<String> = ckpt.meta(name).unwrap().shape().iter().map(|d| d.to_string()).collect();
        header.push(format!(r#""{prefix}{name}":{{"dtype":"F32","shape":[{}],"data_offsets":[{start},{}]}}"#, shape.join(","), body.len()));
    }
    let mut json = format!("{{{}}}", header.join(",")).into_bytes();
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend(json);
    file.extend(body);
    std::fs::write(path, file).unwrap();
}

#[test]
fn prefixed_safetensors_without_config_decodes_the_same() {
    let dir = Scratch::new("prefixed");
    let file = dir.0.join("vocoder.safetensors");
    write_prefixed_safetensors(&file, "vocoder.");
    // The directory form finds the only .safetensors; the file form is the same file.
    for path in [dir.0.clone(), file.clone()] {
        let vocos = Vocos::open(&path, CpuBackend::new()).unwrap();
        let c = vocos.config();
        assert_eq!(c.prefix, "vocoder.");
        assert_eq!((c.hop, c.hop_source.clone()), (256, HopSource::Default));
        let (mel, frames) = golden_mel();
        check(
            "prefixed safetensors decode",
            &vocos.decode(&mel, frames).unwrap(),
            &npy(&fixtures().join("goldens/vocos_tiny_decode.npy")),
            1e-5,
        );
    }
}

#[test]
fn config_that_contradicts_the_weights_is_refused() {
    let tiny = fixtures().join("models/vocos-tiny");
    let yaml = std::fs::read_to_string(tiny.join("config.yaml")).unwrap();
    // Edits apply to the `head:` section only (the feature extractor states n_fft and hop too).
    let (before_head, head) = yaml.split_at(yaml.find("\nhead:").expect("head section"));
    for (tag, from, to, needle) in [
        ("nfft", "n_fft: 1024", "n_fft: 2048", "head.init_args.n_fft is 2048"),
        ("dim", "dim: 64", "dim: 65", "head.init_args.dim is 65"),
        ("padding", "padding: center", "padding: same", "padding \"same\""),
        ("hop", "hop_length: 256", "hop_length: 0", "hop 0"),
        ("class", "vocos.heads.ISTFTHead", "vocos.heads.IMDCTCosHead", "IMDCTCosHead is not supported"),
    ] {
        let dir = Scratch::new(tag);
        std::fs::copy(tiny.join("pytorch_model.bin"), dir.0.join("pytorch_model.bin")).unwrap();
        let edited = format!("{before_head}{}", head.replacen(from, to, 1));
        assert_ne!(edited, yaml, "{tag}: edit did not apply");
        std::fs::write(dir.0.join("config.yaml"), edited).unwrap();
        let err = Vocos::open(&dir.0, CpuBackend::new()).err().expect(tag).to_string();
        assert!(err.contains(needle), "{tag}: {err}");
    }
}

// ── bad input ─────────────────────────────────────────────────────────────────────────────

#[test]
fn bad_mels_are_refused_with_their_reason() {
    let vocos = Vocos::open(fixtures().join("models/vocos-tiny"), CpuBackend::new()).unwrap();
    let msg = |mel: &[f32], frames| vocos.decode(mel, frames).unwrap_err().to_string();
    assert!(msg(&[], 0).contains("at least 2 mel frames, got 0"));
    assert!(msg(&[0.0; 100], 1).contains("at least 2 mel frames, got 1"));
    assert!(msg(&[0.0; 160], 2).contains("80 channels per frame"), "{}", msg(&[0.0; 160], 2));
    assert!(msg(&[0.0; 250], 3).contains("not a multiple of the 100 mel channels"));
    assert!(msg(&[0.0; 300], 7).contains("holds 3 frames of 100 channels, but 7 frames"), "{}", msg(&[0.0; 300], 7));
    let mut mel = vec![-3.0f32; 500];
    mel[3 * 100 + 17] = f32::NAN;
    mel[4 * 100] = f32::INFINITY;
    match vocos.decode(&mel, 5) {
        Err(VocosError::NonFinite { frame: 3, channel: 17, value }) => assert!(value.is_nan()),
        other => panic!("expected the NaN at frame 3 channel 17, got {other:?}"),
    }
    mel[3 * 100 + 17] = 0.0;
    assert!(msg(&mel, 5).contains("mel frame 4 channel 0 is inf"));
    // Two frames are enough: hop samples out, as torch.istft gives.
    assert_eq!(vocos.decode(&[-3.0; 200], 2).unwrap().len(), 256);
}

#[test]
fn bad_spectra_are_refused() {
    let msg = |re: &[f32], im: &[f32], frames, n_fft, hop| istft(re, im, frames, n_fft, hop).unwrap_err().to_string();
    assert!(msg(&[0.0; 9], &[0.0; 9], 1, 16, 4).contains("at least 2 frames, got 1"));
    assert!(msg(&[0.0; 18], &[0.0; 17], 2, 16, 4).contains("got 18 and 17"));
    assert!(msg(&[0.0; 18], &[0.0; 18], 2, 15, 4).contains("n_fft must be even"));
    assert!(msg(&[0.0; 18], &[0.0; 18], 2, 16, 0).contains("hop must be in 1..=16"));
    // hop = n_fft: every window is zero where the next begins, so nothing can divide there.
    assert!(msg(&[1.0; 27], &[0.0; 27], 3, 16, 16).contains("NOLA"));
}
