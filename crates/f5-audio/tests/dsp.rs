//! Known-answer and naive-reference tests that do not need the Python fixtures.

use std::f64::consts::PI;

use f5_audio::mel::{hann_window_periodic, melscale_fbanks_htk, reflect_pad, MelSpectrogram, N_FREQS, N_MELS};
use f5_audio::output::{cross_fade_append, f64_to_pcm16, join_chunks, numpy_linspace};
use f5_audio::{decode_bytes, AudioError};

/// ‖a − b‖₂ / ‖b‖₂ in f64.
fn rel_l2(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(&x, &y)| (f64::from(x) - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den).sqrt()
}

/// Broadband pseudo-noise plus a tone. Every mel band holds real energy, so comparisons are not
/// dominated by rounding floors in empty bands.
fn noisy_signal(n: usize) -> Vec<f32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let noise = ((state >> 40) as f64 / (1u64 << 24) as f64) - 0.5;
            (0.2 * noise + 0.3 * (2.0 * PI * 440.0 * i as f64 / 24000.0).sin()) as f32
        })
        .collect()
}

fn test_signal(n: usize, rate: f64) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let t = i as f64 / rate;
            (0.3 * (2.0 * PI * 440.0 * t).sin() + 0.1 * (2.0 * PI * 3100.0 * t).sin() + 0.05 * (i as f64 * 0.37).sin()) as f32
        })
        .collect()
}

#[test]
fn window_is_periodic_hann() {
    let w = hann_window_periodic(1024);
    let periodic: Vec<f64> = (0..1024).map(|n| 0.5 - 0.5 * (2.0 * PI * n as f64 / 1024.0).cos()).collect();
    let symmetric: Vec<f64> = (0..1024).map(|n| 0.5 - 0.5 * (2.0 * PI * n as f64 / 1023.0).cos()).collect();
    // f32 rounding of the argument and result only: ~1e-8.
    assert!(rel_l2(&w, &periodic) < 1e-6);
    // A symmetric window differs by ~1e-3 relative; this must be distinguishable.
    assert!(rel_l2(&w, &symmetric) > 1e-4);
}

/// Naive f64 HTK triangular filterbank, written from the formula in F5-SPEC §6.
fn naive_htk_fbank() -> Vec<f64> {
    let mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
    let m_max = mel(12000.0);
    let f_pts: Vec<f64> = (0..N_MELS + 2)
        .map(|i| {
            let m = m_max * i as f64 / (N_MELS + 1) as f64;
            700.0 * (10f64.powf(m / 2595.0) - 1.0)
        })
        .collect();
    let mut fb = vec![0.0; N_FREQS * N_MELS];
    for k in 0..N_FREQS {
        let f = 12000.0 * k as f64 / 512.0;
        for j in 0..N_MELS {
            let down = (f - f_pts[j]) / (f_pts[j + 1] - f_pts[j]);
            let up = (f_pts[j + 2] - f) / (f_pts[j + 2] - f_pts[j + 1]);
            fb[k * N_MELS + j] = down.min(up).max(0.0);
        }
    }
    fb
}

/// Naive f64 Slaney-scale filterbank (librosa's default scale, no area norm).
fn naive_slaney_fbank() -> Vec<f64> {
    let f_sp = 200.0 / 3.0;
    let min_log_mel = 1000.0 / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    let hz_to_mel = |f: f64| if f >= 1000.0 { min_log_mel + (f / 1000.0).ln() / logstep } else { f / f_sp };
    let mel_to_hz = |m: f64| if m >= min_log_mel { 1000.0 * (logstep * (m - min_log_mel)).exp() } else { f_sp * m };
    let m_max = hz_to_mel(12000.0);
    let f_pts: Vec<f64> = (0..N_MELS + 2).map(|i| mel_to_hz(m_max * i as f64 / (N_MELS + 1) as f64)).collect();
    let mut fb = vec![0.0; N_FREQS * N_MELS];
    for k in 0..N_FREQS {
        let f = 12000.0 * k as f64 / 512.0;
        for j in 0..N_MELS {
            let down = (f - f_pts[j]) / (f_pts[j + 1] - f_pts[j]);
            let up = (f_pts[j + 2] - f) / (f_pts[j + 2] - f_pts[j + 1]);
            fb[k * N_MELS + j] = down.min(up).max(0.0);
        }
    }
    fb
}

#[test]
fn filterbank_is_htk_not_slaney() {
    let ours = MelSpectrogram::new().filterbank().to_vec();
    // f32 evaluation of the same formula: ~1e-6 relative.
    assert!(rel_l2(&ours, &naive_htk_fbank()) < 1e-5);
    assert!(rel_l2(&ours, &naive_slaney_fbank()) > 1e-2);
    // The table of torch's edge frequencies and the formula agree.
    let formula = melscale_fbanks_htk(N_FREQS, 0.0, 12000.0, N_MELS, 24000);
    assert!(rel_l2(&formula, &naive_htk_fbank()) < 1e-5);
}

/// Naive f64 log-mel of one frame with an explicit DFT. The windowed frame is rounded to f32,
/// as torch's float32 STFT does before transforming: without that, bands holding ~1e-5 of the
/// energy differ by ~1e-2 in the log and the comparison would measure rounding, not the method.
fn naive_log_mel_frame(frame: &[f64]) -> Vec<f64> {
    let fb = naive_htk_fbank();
    let windowed: Vec<f64> = (0..1024)
        .map(|n| {
            let w = 0.5 - 0.5 * (2.0 * PI * n as f64 / 1024.0).cos();
            f64::from((frame[n] as f32) * (w as f32))
        })
        .collect();
    let mut mags = vec![0.0; N_FREQS];
    for (k, mag) in mags.iter_mut().enumerate() {
        let (mut re, mut im) = (0.0, 0.0);
        for (n, &v) in windowed.iter().enumerate() {
            let a = -2.0 * PI * ((k * n) % 1024) as f64 / 1024.0;
            re += v * a.cos();
            im += v * a.sin();
        }
        *mag = re.hypot(im);
    }
    (0..N_MELS).map(|j| (0..N_FREQS).map(|k| mags[k] * fb[k * N_MELS + j]).sum::<f64>().max(1e-5).ln()).collect()
}

#[test]
fn mel_matches_naive_dft_with_reflect_padding() {
    let n = 3000;
    let wave = noisy_signal(n);
    let mel = MelSpectrogram::new().log_mel(&wave).unwrap();
    assert_eq!(mel.len(), (1 + n / 256) * N_MELS);
    let x: Vec<f64> = wave.iter().map(|&v| f64::from(v)).collect();
    // Frame 0 covers padded[0..1024] = reflect(x)[..512] ++ x[..512].
    let reflect: Vec<f64> = (0..1024).map(|i| if i < 512 { x[512 - i] } else { x[i - 512] }).collect();
    let zero: Vec<f64> = (0..1024).map(|i| if i < 512 { 0.0 } else { x[i - 512] }).collect();
    let expect = naive_log_mel_frame(&reflect);
    let zero_padded = naive_log_mel_frame(&zero);
    // Filterbank rounding (f32) and FFT rounding: ~1e-6.
    assert!(rel_l2(&mel[..N_MELS], &expect) < 1e-5, "{}", rel_l2(&mel[..N_MELS], &expect));
    assert!(rel_l2(&mel[..N_MELS], &zero_padded) > 1e-3);
    // An interior frame (no padding involved): frame 5 covers x[5·256 − 512 ..].
    let start = 5 * 256 - 512;
    let interior = naive_log_mel_frame(&x[start..start + 1024]);
    let err = rel_l2(&mel[5 * N_MELS..6 * N_MELS], &interior);
    assert!(err < 1e-5, "{err}");
}

#[test]
fn mel_of_silence_is_log_floor_and_short_input_is_an_error() {
    let mel = MelSpectrogram::new().log_mel(&vec![0.0; 1000]).unwrap();
    assert!(mel.iter().all(|&v| v == 1e-5f32.ln()));
    let err = MelSpectrogram::new().log_mel(&[0.1; 512]).unwrap_err();
    assert!(matches!(err, AudioError::TooShortForMel { len: 512, pad: 512, .. }), "{err}");
    assert!(MelSpectrogram::new().log_mel(&[0.1; 513]).is_ok());
    assert_eq!(reflect_pad(&[1.0, 2.0, 3.0], 2).unwrap(), vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]);
}

/// torchaudio's kernel written independently in f64 (Hann² window, rolloff 0.99, width 6).
fn naive_torchaudio_resample(x: &[f32], orig: usize, new: usize) -> Vec<f64> {
    let base = orig.min(new) as f64 * 0.99;
    let width = (6.0 * orig as f64 / base).ceil() as i64;
    let blocks = x.len() / orig + 1;
    let target = ((new * x.len()) as f64 / orig as f64).ceil() as usize;
    let mut out = Vec::new();
    for b in 0..blocks {
        for i in 0..new {
            let mut acc = 0.0;
            for k in -width..width + orig as i64 {
                let t = ((k as f64 / orig as f64) - (i as f64 / new as f64)) * base;
                let t = t.clamp(-6.0, 6.0);
                let w = (t * PI / 12.0).cos().powi(2);
                let s = if t == 0.0 { 1.0 } else { (t * PI).sin() / (t * PI) };
                let idx = (b * orig) as i64 + k;
                if idx >= 0 && (idx as usize) < x.len() {
                    acc += s * w * base / orig as f64 * f64::from(x[idx as usize]);
                }
            }
            out.push(acc);
        }
    }
    out.truncate(target);
    out
}

#[test]
fn resampler_matches_naive_hann_sinc() {
    for (from, orig, new) in [(16000u32, 2usize, 3usize), (44100, 147, 80), (48000, 2, 1)] {
        let x = test_signal(5000, f64::from(from));
        let ours = f5_audio::resample(&x, from, 24000).unwrap();
        let naive = naive_torchaudio_resample(&x, orig, new);
        assert_eq!(ours.len(), naive.len());
        // f32 kernel rounding: ~1e-7.
        let err = rel_l2(&ours, &naive);
        assert!(err < 1e-6, "{from}: {err}");
    }
}

#[test]
fn resampler_window_is_hann_squared_not_kaiser() {
    // Kaiser-windowed variant (torchaudio's other method) must be clearly different.
    let x = test_signal(4000, 44100.0);
    let ours = f5_audio::resample(&x, 44100, 24000).unwrap();
    let base = 80.0 * 0.99;
    let beta: f64 = 14.769656459379492;
    let i0 = |v: f64| (0..30).fold((0.0, 1.0), |(s, term), k| (s + term, term * (v / 2.0).powi(2) / f64::from((k + 1) * (k + 1)))).0;
    let mut kaiser = Vec::new();
    for b in 0..(x.len() / 147 + 1) {
        for i in 0..80 {
            let mut acc = 0.0;
            for k in -12i64..12 + 147 {
                let t = ((k as f64 / 147.0) - (i as f64 / 80.0)) * base;
                let t = t.clamp(-6.0, 6.0);
                let w = i0(beta * (1.0 - (t / 6.0).powi(2)).max(0.0).sqrt()) / i0(beta);
                let s = if t == 0.0 { 1.0 } else { (t * PI).sin() / (t * PI) };
                let idx = (b * 147) as i64 + k;
                if idx >= 0 && (idx as usize) < x.len() {
                    acc += s * w * base / 147.0 * f64::from(x[idx as usize]);
                }
            }
            kaiser.push(acc);
        }
    }
    kaiser.truncate(ours.len());
    assert!(rel_l2(&ours, &kaiser) > 1e-4);
}

#[test]
fn resampling_same_rate_copies_and_bad_rates_fail() {
    let x = vec![0.25f32, -0.5, 0.125];
    assert_eq!(f5_audio::resample(&x, 24000, 24000).unwrap(), x);
    assert!(matches!(f5_audio::resample(&x, 0, 24000), Err(AudioError::BadSampleRate { rate: 0, .. })));
    assert!(matches!(f5_audio::resample(&x, 2_000_000, 24000), Err(AudioError::BadSampleRate { .. })));
    // A coprime pair still builds quickly thanks to the sparse kernel rows.
    let y = f5_audio::resample(&vec![0.1; 441], 44099, 24000).unwrap();
    assert_eq!(y.len(), 241);
}

#[test]
fn linspace_follows_numpy() {
    assert_eq!(numpy_linspace(1.0, 0.0, 1), vec![1.0]);
    assert_eq!(numpy_linspace(0.0, 1.0, 2), vec![0.0, 1.0]);
    assert_eq!(numpy_linspace(0.0, 1.0, 5), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    let down = numpy_linspace(1.0, 0.0, 3600);
    assert_eq!(down[0], 1.0);
    assert_eq!(down[3599], 0.0);
    assert_eq!(down[1], 1.0 * 1.0 + -1.0 / 3599.0);
}

#[test]
fn cross_fade_is_linear_over_the_overlap() {
    let prev: Vec<f64> = vec![1.0; 10];
    let next: Vec<f32> = vec![-1.0; 8];
    let out = cross_fade_append(&prev, &next, 5);
    assert_eq!(out.len(), 10 + 8 - 5);
    assert_eq!(&out[..5], &[1.0; 5]);
    // overlap: 1·(1 − i/4) + (−1)·(i/4)
    for i in 0..5 {
        let a = i as f64 / 4.0;
        assert!((out[5 + i] - ((1.0 - a) - a)).abs() < 1e-15);
    }
    assert_eq!(&out[10..], &[-1.0; 3]);
    // Fade longer than either side is clamped; c = 1 keeps prev's last sample.
    assert_eq!(cross_fade_append(&[0.5], &[0.25, 0.75], 3600), vec![0.5, 0.75]);
    // No fade: plain concatenation.
    assert_eq!(join_chunks(&[vec![0.5], vec![0.25]], 0), vec![0.5, 0.25]);
}

#[test]
fn pcm16_rounding_matches_libsndfile() {
    // Values measured with soundfile 0.14 / libsndfile 1.2.2 (`soundfile.write`, PCM_16).
    for (x, want) in [(0.7, 22937), (-0.3, -9831), (0.5, 16384), (-0.7, -22938), (1.0, 32767), (-1.0, -32768), (1.2, 32767), (-1.3, -32768)]
    {
        assert_eq!(f64_to_pcm16(x), want, "{x}");
    }
    assert_eq!(f64_to_pcm16(1.0 / 65536.0), 0);
    assert_eq!(f64_to_pcm16(-1.0 / 65536.0), -1);
}

fn wav_header(channels: u16, rate: u32, bits: u16, data: &[u8]) -> Vec<u8> {
    let block = channels as u32 * u32::from(bits / 8);
    let mut v = Vec::new();
    v.extend_from_slice(b"RIFF");
    v.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    v.extend_from_slice(b"WAVEfmt ");
    v.extend_from_slice(&16u32.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&channels.to_le_bytes());
    v.extend_from_slice(&rate.to_le_bytes());
    v.extend_from_slice(&(rate.wrapping_mul(block)).to_le_bytes());
    v.extend_from_slice(&(block as u16).to_le_bytes());
    v.extend_from_slice(&bits.to_le_bytes());
    v.extend_from_slice(b"data");
    v.extend_from_slice(&(data.len() as u32).to_le_bytes());
    v.extend_from_slice(data);
    v
}

#[test]
fn int16_wav_decodes_as_x_over_32768() {
    let samples: [i16; 4] = [0, 16384, -32768, 32767];
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    let d = decode_bytes(&wav_header(1, 16000, 16, &data), "t.wav", Some("wav")).unwrap();
    assert_eq!(d.sample_rate, 16000);
    assert_eq!(d.channels[0], vec![0.0, 0.5, -1.0, 32767.0 / 32768.0]);
    // Stereo mean.
    let data: Vec<u8> = [1000i16, 3000, -2000, 0].iter().flat_map(|s| s.to_le_bytes()).collect();
    let d = decode_bytes(&wav_header(2, 8000, 16, &data), "s.wav", None).unwrap();
    assert_eq!(d.to_mono(), vec![2000.0 / 32768.0, -1000.0 / 32768.0]);
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    assert!(matches!(decode_bytes(&[], "e.wav", None), Err(AudioError::EmptyInput { .. })));
    assert!(matches!(decode_bytes(b"this is not audio at all, just text", "x.txt", None), Err(AudioError::NotAudio { .. })));
    let one: Vec<u8> = 100i16.to_le_bytes().to_vec();
    assert!(matches!(decode_bytes(&wav_header(0, 16000, 16, &one), "z.wav", None), Err(AudioError::BadChannelCount { channels: 0, .. })));
    assert!(matches!(decode_bytes(&wav_header(1, 0, 16, &one), "r0.wav", None), Err(AudioError::BadSampleRate { rate: 0, .. })));
    assert!(matches!(decode_bytes(&wav_header(1, 2_000_000, 16, &one), "rb.wav", None), Err(AudioError::BadSampleRate { .. })));
    assert!(matches!(decode_bytes(&wav_header(1, 16000, 16, &[]), "n.wav", None), Err(AudioError::NoSamples { .. })));
    // Truncated header.
    let h = wav_header(1, 16000, 16, &one);
    assert!(decode_bytes(&h[..20], "t.wav", None).is_err());
}

#[test]
fn nan_samples_are_rejected_with_their_position() {
    let spec = hound::WavSpec { channels: 1, sample_rate: 24000, bits_per_sample: 32, sample_format: hound::SampleFormat::Float };
    let mut cursor = std::io::Cursor::new(Vec::new());
    {
        let mut w = hound::WavWriter::new(&mut cursor, spec).unwrap();
        for x in [0.0f32, 0.5, f32::NAN, 0.1] {
            w.write_sample(x).unwrap();
        }
        w.finalize().unwrap();
    }
    let err = decode_bytes(&cursor.into_inner(), "nan.wav", None).unwrap_err();
    assert!(matches!(err, AudioError::NonFiniteSample { index: 2, .. }), "{err}");
}

#[test]
fn rms_normalisation_only_raises_and_can_be_undone() {
    let mut quiet = vec![0.01f32, -0.01, 0.01, -0.01];
    let norm = f5_audio::normalize_rms(&mut quiet, 0.1);
    assert!(norm.raised);
    assert!((f5_audio::rms(&quiet) - 0.1).abs() < 1e-6);
    let mut out = quiet.clone();
    norm.undo(&mut out);
    assert!((out[0] - 0.01).abs() < 1e-8);
    let mut loud = vec![0.5f32, -0.5];
    let norm = f5_audio::normalize_rms(&mut loud, 0.1);
    assert!(!norm.raised);
    assert_eq!(loud, vec![0.5, -0.5]);
    let mut silent = vec![0.0f32; 4];
    assert!(!f5_audio::normalize_rms(&mut silent, 0.1).raised);
}

#[test]
fn peak_limit_scales_once() {
    let mut x = vec![0.5f32, -2.0, 1.0];
    let gain = f5_audio::limit_peak(&mut x, 1.0);
    assert_eq!(gain, 0.5);
    assert_eq!(x, vec![0.25, -1.0, 0.5]);
    let mut y = vec![0.5f32, -0.9];
    assert_eq!(f5_audio::limit_peak(&mut y, 1.0), 1.0);
    assert_eq!(y, vec![0.5, -0.9]);
}

/// A limited decode keeps the first `max_seconds` and says it cut; within the limit it keeps
/// everything and says it did not; the sample budget bounds many-channel files too.
#[test]
fn limited_decode_stops_at_the_limit() {
    use f5_audio::decode::{decode_bytes_limited, read_regular_file, DecodeLimit};
    let limit = DecodeLimit { max_seconds: 2.0, max_samples: 1 << 20 };
    let long: Vec<u8> = (0..8000 * 5).flat_map(|i| ((i % 200) as i16 * 50).to_le_bytes()).collect();
    let d = decode_bytes_limited(&wav_header(1, 8000, 16, &long), "long.wav", None, limit).unwrap();
    assert!(d.cut);
    assert_eq!(d.audio.len(), 16_000, "2 s at 8 kHz");
    let short = &long[..8000 * 2 * 2];
    let d = decode_bytes_limited(&wav_header(1, 8000, 16, short), "short.wav", None, limit).unwrap();
    assert!(!d.cut);
    assert_eq!(d.audio.len(), 16_000);
    let tight = DecodeLimit { max_seconds: 100.0, max_samples: 4000 };
    let d = decode_bytes_limited(&wav_header(2, 8000, 16, &long), "stereo.wav", None, tight).unwrap();
    assert!(d.cut);
    assert_eq!(d.audio.len(), 2000, "4000 samples over two channels");
    // Devices and FIFOs are refused before they are read.
    assert!(matches!(read_regular_file(std::path::Path::new("/dev/zero"), 1 << 20), Err(AudioError::Io { .. })));
}

mod limited_decode_fuzz {
    use f5_audio::decode::{decode_bytes_limited, DecodeLimit};
    use proptest::prelude::*;

    /// The containers' magic numbers, so the fuzzed bytes reach the parsers, not the sniffing.
    const MAGICS: [&[u8]; 4] = [b"fLaC", b"OggS", b"ID3\x03", b"RIFF\x24\x00\x00\x00WAVEfmt "];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        /// Arbitrary bytes behind a container's magic: an error or audio within the limit,
        /// never a panic and never more frames than the limit allows.
        #[test]
        fn arbitrary_bytes_decode_within_the_limit(magic in 0usize..4, tail in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let mut bytes = MAGICS[magic].to_vec();
            bytes.extend_from_slice(&tail);
            let limit = DecodeLimit { max_seconds: 0.5, max_samples: 1 << 16 };
            if let Ok(d) = decode_bytes_limited(&bytes, "fuzz", None, limit) {
                let frames = d.audio.len() as f64;
                prop_assert!(frames <= (0.5 * f64::from(d.audio.sample_rate)).ceil().max(1.0));
                prop_assert!(d.audio.len() * d.audio.channel_count() <= 1 << 16);
            }
        }
    }
}

/// A fuzzer-found input (an MP3 tag with a WAV header further in, which symphonia's probe finds)
/// whose `fmt ` chunk declares 16384+ channels made symphonia's RIFF reader overflow a 16-bit
/// product (a panic in checked builds). It is refused, naming the count, before any decoder
/// reads it.
#[test]
fn a_wav_declaring_absurd_channel_counts_is_refused_before_decoding() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/audio_decode/symphonia-riff-fmt-block-align-overflow");
    let bytes = std::fs::read(&path).expect("the fuzz seed");
    match f5_audio::decode::decode_bytes(&bytes, "fuzzed", Some("wav")) {
        Err(f5_audio::AudioError::BadChannelCount { channels, .. }) => assert!(channels > 64),
        other => panic!("expected a channel-count refusal, got {other:?}"),
    }
}
