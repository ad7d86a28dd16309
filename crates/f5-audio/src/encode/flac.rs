//! FLAC through `flacenc` (pure Rust, Apache-2.0), one fixed-size block at a time so a stream
//! can send each frame as soon as its block is full. The stream's STREAMINFO says
//! "unknown" where it must (total samples 0, MD5 all zero, frame sizes 0), which the format
//! allows; `final_header` gives the exact one for a writer that can seek back.

use flacenc::bitsink::ByteSink;
use flacenc::component::{BitRepr, Stream, StreamInfo};
use flacenc::config;
use flacenc::error::{Verified, Verify};
use flacenc::source::{Context, Fill, FrameBuf};

use crate::error::{AudioError, Result};

/// Samples per channel in each FLAC frame: libFLAC's default, 170 ms at 24 kHz. A stream holds
/// back at most one block less a sample.
pub const FLAC_BLOCK_SIZE: usize = 4096;
/// Highest rate `flacenc` accepts in STREAMINFO.
const FLAC_MAX_RATE: u32 = 96_000;
const BITS_PER_SAMPLE: usize = 16;

fn flac_err(detail: impl std::fmt::Display) -> AudioError {
    AudioError::Encode { format: "flac".into(), detail: detail.to_string() }
}

pub(crate) struct FlacStream {
    config: Verified<config::Encoder>,
    channels: usize,
    /// STREAMINFO as the stream header states it (the "unknown" fields left unknown).
    stream_info: StreamInfo,
    /// STREAMINFO accumulating the frames written, for `final_header`.
    final_info: StreamInfo,
    framebuf: FrameBuf,
    context: Context,
    /// Interleaved samples of the block being filled.
    pending: Vec<i32>,
    header_sent: bool,
    frames_written: usize,
}

impl FlacStream {
    pub(crate) fn new(sample_rate: u32, channels: u16) -> Result<Self> {
        if sample_rate > FLAC_MAX_RATE {
            return Err(AudioError::EncoderSetting {
                format: "flac".into(),
                what: "sample rate",
                value: u64::from(sample_rate),
                supported: format!("1 to {FLAC_MAX_RATE} Hz"),
            });
        }
        let channels = usize::from(channels);
        let config = config::Encoder::default().into_verified().map_err(|(_, e)| flac_err(e))?;
        let mut stream_info = StreamInfo::new(sample_rate as usize, channels, BITS_PER_SAMPLE).map_err(flac_err)?;
        stream_info.set_block_sizes(FLAC_BLOCK_SIZE, FLAC_BLOCK_SIZE).map_err(flac_err)?;
        let final_info = stream_info.clone();
        stream_info.set_frame_sizes(0, 0).map_err(flac_err)?;
        Ok(Self {
            config,
            channels,
            stream_info,
            final_info,
            framebuf: FrameBuf::with_size(channels, FLAC_BLOCK_SIZE).map_err(flac_err)?,
            context: Context::new(BITS_PER_SAMPLE, channels),
            pending: Vec::with_capacity(FLAC_BLOCK_SIZE * channels),
            header_sent: false,
            frames_written: 0,
        })
    }

    fn header_bytes(info: &StreamInfo) -> Result<Vec<u8>> {
        let stream = Stream::with_stream_info(info.clone());
        let mut sink = ByteSink::new();
        stream.write(&mut sink).map_err(flac_err)?;
        Ok(sink.into_inner())
    }

    fn take_header(&mut self, out: &mut Vec<u8>) -> Result<()> {
        if !self.header_sent {
            out.extend(Self::header_bytes(&self.stream_info)?);
            self.header_sent = true;
        }
        Ok(())
    }

    /// Encodes `pending` (one block, or the shorter last one) as a frame.
    fn encode_pending(&mut self, out: &mut Vec<u8>) -> Result<()> {
        (&mut self.framebuf, &mut self.context).fill_interleaved(&self.pending).map_err(flac_err)?;
        let frame =
            flacenc::encode_fixed_size_frame(&self.config, &self.framebuf, self.frames_written, &self.stream_info).map_err(flac_err)?;
        let mut sink = ByteSink::new();
        frame.write(&mut sink).map_err(flac_err)?;
        out.extend_from_slice(sink.as_slice());
        self.final_info.update_frame_info(&frame);
        self.frames_written += 1;
        self.pending.clear();
        Ok(())
    }

    pub(crate) fn push(&mut self, pcm: &[i16]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.take_header(&mut out)?;
        let block = FLAC_BLOCK_SIZE * self.channels;
        let mut rest = pcm;
        while !rest.is_empty() {
            let take = (block - self.pending.len()).min(rest.len());
            self.pending.extend(rest[..take].iter().map(|&s| i32::from(s)));
            rest = &rest[take..];
            if self.pending.len() == block {
                self.encode_pending(&mut out)?;
            }
        }
        Ok(out)
    }

    pub(crate) fn finish(&mut self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.take_header(&mut out)?;
        if !self.pending.is_empty() {
            self.encode_pending(&mut out)?;
        }
        Ok(out)
    }

    pub(crate) fn final_header(&self) -> Option<Vec<u8>> {
        let mut info = self.final_info.clone();
        // update_frame_info lowers the minimum block size to a short last block; the format
        // counts only the blocks before it, and libFLAC states the nominal size for both.
        info.set_block_sizes(FLAC_BLOCK_SIZE, FLAC_BLOCK_SIZE).ok()?;
        if self.frames_written == 0 {
            info.set_frame_sizes(0, 0).ok()?;
        }
        info.set_md5_digest(&self.context.md5_digest());
        Self::header_bytes(&info).ok()
    }
}
