//! MP3 through `rusty_mp3` (pure Rust, Apache-2.0): constant bitrate, MPEG-2 Layer III at the
//! model's 24 kHz (576-sample frames, sent as each fills).
//!
//! `rusty_mp3` opens its output with a LAME-style Info tag frame recording the encoder delay,
//! the end padding and the frame count, for gapless decoding; the counts are only known at the
//! end. A whole file gets the completed tag (decoders that read it give back exactly the input's
//! length). A stream that has already sent audio cannot go back, and a tag with a frame count of
//! zero makes symphonia decode nothing, so a stream carries no tag at all, as ffmpeg writes MP3 to
//! a pipe: decoders then play the encoder delay (about 50 ms of silence) and the end padding.
use rusty_mp3::{Mp3Encoder, Mp3EncoderConfig};

use crate::error::{AudioError, Result};

/// The MPEG-1, -2 and -2.5 Layer III sample rates.
pub const MP3_SAMPLE_RATES: [u32; 9] = [8_000, 11_025, 12_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000];

/// Constant bitrate per channel, 64 kbit/s: speech at 24 kHz measures 29 dB SNR through
/// symphonia; stereo gets 128 kbit/s, within MPEG-2's 160 kbit/s ceiling.
pub const MP3_BITRATE_KBPS_PER_CHANNEL: u32 = 64;

fn mp3_err(e: rusty_mp3::Error) -> AudioError {
    AudioError::Encode { format: "mp3".into(), detail: e.to_string() }
}

pub(crate) struct Mp3Stream {
    encoder: Mp3Encoder,
    sample_rate: u32,
    channels: u16,
    /// Whole-file mode: keep every packet until `finish`, so the Info tag is completed in place.
    whole_file: bool,
    /// Whether the first packet (the Info tag) has been handed out or dropped.
    tag_seen: bool,
}

impl Mp3Stream {
    pub(crate) fn new(sample_rate: u32, channels: u16, whole_file: bool) -> Result<Self> {
        if !MP3_SAMPLE_RATES.contains(&sample_rate) {
            return Err(AudioError::EncoderSetting {
                format: "mp3".into(),
                what: "sample rate",
                value: u64::from(sample_rate),
                supported: rates_list(&MP3_SAMPLE_RATES),
            });
        }
        let config = Mp3EncoderConfig { bitrate_kbps: MP3_BITRATE_KBPS_PER_CHANNEL * u32::from(channels), vbr_quality: None };
        Ok(Self { encoder: Mp3Encoder::new(config), sample_rate, channels, whole_file, tag_seen: false })
    }

    /// Everything the encoder has ready. `finished`: the tag, if still queued, is complete.
    fn drain(&mut self, finished: bool) -> Vec<u8> {
        let mut out = Vec::new();
        // `next_packet` answers Again (needs input) or Eof (drained) once the queue is empty.
        while let Ok(packet) = self.encoder.next_packet() {
            if !self.tag_seen {
                self.tag_seen = true;
                // An incomplete tag would state zero frames; drop it (see the module docs).
                if !finished && is_tag_frame(&packet) {
                    continue;
                }
            }
            out.extend_from_slice(&packet);
        }
        out
    }

    pub(crate) fn push(&mut self, pcm: &[i16]) -> Result<Vec<u8>> {
        self.encoder.push_pcm_s16(pcm, self.channels, self.sample_rate).map_err(mp3_err)?;
        Ok(if self.whole_file { Vec::new() } else { self.drain(false) })
    }

    pub(crate) fn finish(&mut self) -> Result<Vec<u8>> {
        // An empty push fixes the stream header when nothing was pushed, so even an empty
        // stream becomes a decodable file (the encoder emits nothing with no header).
        self.encoder.push_pcm_s16(&[], self.channels, self.sample_rate).map_err(mp3_err)?;
        self.encoder.finish();
        Ok(self.drain(true))
    }
}

/// Whether an MP3 frame is an Info/Xing tag: the tag's magic follows the side information
/// (9 to 32 bytes after the 4-byte header, by MPEG version and channel mode).
fn is_tag_frame(frame: &[u8]) -> bool {
    frame.get(..40).is_some_and(|head| head.windows(4).any(|w| w == b"Info" || w == b"Xing"))
}

pub(crate) fn rates_list(rates: &[u32]) -> String {
    rates.iter().map(|r| format!("{r}")).collect::<Vec<_>>().join(", ") + " Hz"
}
