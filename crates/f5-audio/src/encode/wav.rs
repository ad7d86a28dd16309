//! 16-bit PCM WAV and raw PCM. The header is 44 bytes (RIFF, a 16-byte `fmt ` chunk with
//! WAVE_FORMAT_PCM, `data`), the layout hound writes, so a whole-file WAV from here is the file
//! [`crate::output::encode_wav_pcm16`] makes. A stream cannot know its length: its RIFF and data
//! sizes are 0xFFFFFFFF, as ffmpeg writes them to a pipe, which players read as "until the end".

/// Length of the header [`wav_header`] writes.
pub const WAV_HEADER_LEN: usize = 44;

/// The RIFF and data size a streamed WAV header carries: the largest 32-bit value, read by
/// ffmpeg, browsers and symphonia as "data runs to the end of the stream".
pub const WAV_UNKNOWN_SIZE: u32 = u32::MAX;

/// The 44-byte header of a 16-bit PCM WAV. `data_bytes: None` writes [`WAV_UNKNOWN_SIZE`] for
/// both sizes (a stream); `Some(n)` the exact sizes, or `None` is returned if `n` does not fit
/// (RIFF's size field is 32 bits and counts the 36 header bytes after it too).
pub fn wav_header(sample_rate: u32, channels: u16, data_bytes: Option<u64>) -> Option<[u8; WAV_HEADER_LEN]> {
    let (riff_size, data_size) = match data_bytes {
        None => (WAV_UNKNOWN_SIZE, WAV_UNKNOWN_SIZE),
        Some(n) => {
            let data = u32::try_from(n).ok()?;
            (data.checked_add(36)?, data)
        }
    };
    let block_align = channels.checked_mul(2)?;
    let byte_rate = sample_rate.checked_mul(u32::from(block_align))?;
    let mut h = [0u8; WAV_HEADER_LEN];
    h[0..4].copy_from_slice(b"RIFF");
    h[4..8].copy_from_slice(&riff_size.to_le_bytes());
    h[8..12].copy_from_slice(b"WAVE");
    h[12..16].copy_from_slice(b"fmt ");
    h[16..20].copy_from_slice(&16u32.to_le_bytes());
    h[20..22].copy_from_slice(&1u16.to_le_bytes()); // WAVE_FORMAT_PCM
    h[22..24].copy_from_slice(&channels.to_le_bytes());
    h[24..28].copy_from_slice(&sample_rate.to_le_bytes());
    h[28..32].copy_from_slice(&byte_rate.to_le_bytes());
    h[32..34].copy_from_slice(&block_align.to_le_bytes());
    h[34..36].copy_from_slice(&16u16.to_le_bytes());
    h[36..40].copy_from_slice(b"data");
    h[40..44].copy_from_slice(&data_size.to_le_bytes());
    Some(h)
}

/// Raw little-endian bytes of 16-bit samples (OpenAI's `pcm`, and a WAV's data chunk).
pub(crate) fn pcm16_le_bytes(pcm: &[i16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pcm.len() * 2);
    for s in pcm {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

pub(crate) struct WavStream {
    sample_rate: u32,
    channels: u16,
    header_sent: bool,
    data_bytes: u64,
}

impl WavStream {
    pub(crate) fn new(sample_rate: u32, channels: u16) -> Self {
        Self { sample_rate, channels, header_sent: false, data_bytes: 0 }
    }

    fn take_header(&mut self) -> Vec<u8> {
        if self.header_sent {
            return Vec::new();
        }
        self.header_sent = true;
        // Rate and channels were checked by the caller (≤ 1 MHz, ≤ 2 channels): no overflow.
        wav_header(self.sample_rate, self.channels, None).map_or_else(Vec::new, |h| h.to_vec())
    }

    pub(crate) fn push(&mut self, pcm: &[i16]) -> Vec<u8> {
        let mut out = self.take_header();
        out.extend(pcm16_le_bytes(pcm));
        self.data_bytes += pcm.len() as u64 * 2;
        out
    }

    pub(crate) fn finish(&mut self) -> Vec<u8> {
        self.take_header()
    }

    pub(crate) fn final_header(&self) -> Option<Vec<u8>> {
        wav_header(self.sample_rate, self.channels, Some(self.data_bytes)).map(|h| h.to_vec())
    }
}
