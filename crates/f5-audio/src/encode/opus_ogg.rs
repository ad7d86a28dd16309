//! Opus in Ogg (RFC 7845) through libopus (the `opus` crate, built from the libopus sources that
//! `opusic-sys` bundles) and the `ogg` crate's page writer.
//!
//! 20 ms frames at the input rate (24 kHz is one of Opus's native rates, no resampling). Ogg
//! granule positions count 48 kHz samples whatever the input rate. The head states the encoder's
//! look-ahead as pre-skip; the end is padded with zeros until every input sample has left the
//! encoder, and the last page's granule position marks where the input ended, so decoders that
//! follow RFC 7845 (ffmpeg, libopusfile, browsers) give back exactly the input's length.
//! A page is closed at the end of every push that produced a packet, so the audio of a pushed
//! chunk never waits for the next one; longer pushes also fill pages up to Ogg's 255 segments.

use ogg::writing::{PacketWriteEndInfo, PacketWriter};
use opus::{Application, Bitrate, Channels, Encoder};

use crate::error::{AudioError, Result};

/// The input rates libopus encodes natively.
pub const OPUS_SAMPLE_RATES: [u32; 5] = [8_000, 12_000, 16_000, 24_000, 48_000];
/// Frame duration: 20 ms, Opus's default and the best quality per bit for speech and music.
pub const OPUS_FRAME_MS: u32 = 20;
/// Bitrate per channel: 32 kbit/s, the range Opus's own recommendations give for fullband
/// speech (28–40 kbit/s), so the 12 kHz band of 24 kHz speech is kept.
pub const OPUS_BITRATE_PER_CHANNEL: i32 = 32_000;
/// The Ogg logical-stream serial number. One stream per file, so any value is valid; a fixed one
/// keeps the output a function of the input (RFC 7845 asks for random serials only when streams
/// are chained or multiplexed, which these files never are).
pub const OGG_SERIAL: u32 = 0x4635_4f50;
/// Granule positions and pre-skip are always in 48 kHz samples.
const GRANULE_RATE: u32 = 48_000;
/// libopus's recommended output buffer for one packet.
const MAX_PACKET_BYTES: usize = 4000;

fn opus_err(e: impl std::fmt::Display) -> AudioError {
    AudioError::Encode { format: "opus".into(), detail: e.to_string() }
}

pub(crate) struct OpusStream {
    encoder: Encoder,
    writer: PacketWriter<'static, Vec<u8>>,
    channels: usize,
    /// Samples per channel in one frame at the input rate.
    frame: usize,
    /// 48 kHz samples per input sample.
    granule_factor: u64,
    /// Encoder look-ahead in input samples (what the decoder must skip).
    lookahead: u64,
    /// Interleaved samples waiting for a whole frame.
    pending: Vec<i16>,
    /// Samples per channel received.
    frames_in: u64,
    /// Samples per channel encoded (input plus end padding).
    frames_encoded: u64,
    headers_sent: bool,
    packet: Vec<u8>,
}

impl OpusStream {
    pub(crate) fn new(sample_rate: u32, channels: u16) -> Result<Self> {
        if !OPUS_SAMPLE_RATES.contains(&sample_rate) {
            return Err(AudioError::EncoderSetting {
                format: "opus".into(),
                what: "sample rate",
                value: u64::from(sample_rate),
                supported: super::mp3::rates_list(&OPUS_SAMPLE_RATES),
            });
        }
        let layout = if channels == 1 { Channels::Mono } else { Channels::Stereo };
        let mut encoder = Encoder::new(sample_rate, layout, Application::Audio).map_err(opus_err)?;
        encoder.set_bitrate(Bitrate::Bits(OPUS_BITRATE_PER_CHANNEL * i32::from(channels))).map_err(opus_err)?;
        let lookahead = encoder.get_lookahead().map_err(opus_err)?;
        let lookahead = u64::try_from(lookahead).map_err(|_| opus_err(format!("negative look-ahead {lookahead}")))?;
        Ok(Self {
            encoder,
            writer: PacketWriter::new(Vec::new()),
            channels: usize::from(channels),
            frame: (sample_rate * OPUS_FRAME_MS / 1000) as usize,
            granule_factor: u64::from(GRANULE_RATE / sample_rate),
            lookahead,
            pending: Vec::new(),
            frames_in: 0,
            frames_encoded: 0,
            headers_sent: false,
            packet: vec![0; MAX_PACKET_BYTES],
        })
    }

    fn sample_rate(&self) -> u32 {
        GRANULE_RATE / self.granule_factor as u32
    }

    /// The identification header (RFC 7845 §5.1): channel mapping family 0, no output gain.
    fn opus_head(&self) -> Result<Vec<u8>> {
        let pre_skip = u16::try_from(self.lookahead * self.granule_factor)
            .map_err(|_| opus_err(format!("pre-skip of {} samples does not fit 16 bits", self.lookahead)))?;
        let mut head = Vec::with_capacity(19);
        head.extend_from_slice(b"OpusHead");
        head.push(1); // version
        head.push(self.channels as u8);
        head.extend_from_slice(&pre_skip.to_le_bytes());
        head.extend_from_slice(&self.sample_rate().to_le_bytes()); // original input rate
        head.extend_from_slice(&0i16.to_le_bytes()); // output gain
        head.push(0); // mapping family 0: mono or stereo, no table
        Ok(head)
    }

    /// The comment header (RFC 7845 §5.2): the encoder library as vendor, no comments.
    fn opus_tags() -> Vec<u8> {
        let vendor = opus::version().as_bytes();
        let mut tags = Vec::with_capacity(16 + vendor.len());
        tags.extend_from_slice(b"OpusTags");
        tags.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
        tags.extend_from_slice(vendor);
        tags.extend_from_slice(&0u32.to_le_bytes());
        tags
    }

    fn write_headers(&mut self) -> Result<()> {
        if self.headers_sent {
            return Ok(());
        }
        // Each header packet sits alone on its own page, with granule position 0 (§3).
        let head = self.opus_head()?;
        self.writer.write_packet(head, OGG_SERIAL, PacketWriteEndInfo::EndPage, 0).map_err(opus_err)?;
        self.writer.write_packet(Self::opus_tags(), OGG_SERIAL, PacketWriteEndInfo::EndPage, 0).map_err(opus_err)?;
        self.headers_sent = true;
        Ok(())
    }

    /// Encodes the first whole frame of `pending` and queues its packet; `end_trim` gives the
    /// last packet the granule position where the input ends.
    fn encode_frame(&mut self, end: PacketWriteEndInfo, end_trim: bool) -> Result<()> {
        let n = self.frame * self.channels;
        let len = self.encoder.encode(&self.pending[..n], &mut self.packet).map_err(opus_err)?;
        self.pending.drain(..n);
        self.frames_encoded += self.frame as u64;
        let granule =
            if end_trim { (self.lookahead + self.frames_in) * self.granule_factor } else { self.frames_encoded * self.granule_factor };
        self.writer.write_packet(self.packet[..len].to_vec(), OGG_SERIAL, end, granule).map_err(opus_err)?;
        Ok(())
    }

    fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(self.writer.inner_mut())
    }

    pub(crate) fn push(&mut self, pcm: &[i16]) -> Result<Vec<u8>> {
        self.write_headers()?;
        self.pending.extend_from_slice(pcm);
        self.frames_in += (pcm.len() / self.channels) as u64;
        let n = self.frame * self.channels;
        while self.pending.len() >= n {
            // The last whole frame of this push closes its page, so nothing waits for more input.
            let last = self.pending.len() < 2 * n;
            let end = if last { PacketWriteEndInfo::EndPage } else { PacketWriteEndInfo::NormalPacket };
            self.encode_frame(end, false)?;
        }
        Ok(self.take_bytes())
    }

    pub(crate) fn finish(&mut self) -> Result<Vec<u8>> {
        self.write_headers()?;
        // Pad with zeros until the look-ahead has carried every input sample out, in whole
        // frames; at least one frame, which carries the end-of-stream flag.
        let needed = self.frames_in + self.lookahead;
        let frame = self.frame as u64;
        let total = (needed.div_ceil(frame) * frame).max(self.frames_encoded + frame);
        let pad = (total - self.frames_encoded) as usize * self.channels;
        self.pending.resize(pad, 0);
        let n = self.frame * self.channels;
        while self.pending.len() > n {
            self.encode_frame(PacketWriteEndInfo::NormalPacket, false)?;
        }
        self.encode_frame(PacketWriteEndInfo::EndStream, true)?;
        Ok(self.take_bytes())
    }
}
