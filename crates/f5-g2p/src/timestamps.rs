//! Word timestamps from the duration predictor, as kokoro's `KPipeline.join_timestamps` makes
//! them: `pred_dur` counts frames per input position (BOS, one per phoneme character, EOS);
//! times are kept in half-frames and divided by 80 (a frame is 600 samples at 24 kHz = 25 ms,
//! half a frame 12.5 ms = 1/80 s), and the first word starts 3 frames before BOS ends.

use crate::token::Token;

const MAGIC_DIVISOR: f64 = 80.0;

/// Set `start_ts`/`end_ts` on `tokens` (one chunk's tokens) from that chunk's `pred_dur`.
/// A token past the end of `pred_dur` keeps no times, as in the reference.
pub fn join_timestamps(tokens: &mut [Token], pred_dur: &[i64]) {
    if tokens.is_empty() || pred_dur.len() < 3 {
        return;
    }
    let n = pred_dur.len();
    let mut left = 2 * (pred_dur[0] - 3).max(0);
    let mut right = left;
    let mut i = 1usize;
    for t in tokens.iter_mut() {
        if i >= n - 1 {
            break;
        }
        let ps_len = t.phonemes.as_deref().map_or(0, |p| p.chars().count());
        if ps_len == 0 {
            if !t.whitespace.is_empty() {
                // the reference advances twice here and reads pred_dur[i] after each step
                i += 1;
                let d = pred_dur.get(i).copied().unwrap_or(0);
                left = right + d;
                right = left + d;
                i += 1;
            }
            continue;
        }
        let j = i + ps_len;
        if j >= n {
            break;
        }
        t.start_ts = Some(left as f64 / MAGIC_DIVISOR);
        let token_dur: i64 = pred_dur[i..j].iter().sum();
        let space_dur = if t.whitespace.is_empty() { 0 } else { pred_dur[j] };
        left = right + 2 * token_dur + space_dur;
        t.end_ts = Some(left as f64 / MAGIC_DIVISOR);
        right = left + space_dur;
        i = j + usize::from(!t.whitespace.is_empty());
    }
}
