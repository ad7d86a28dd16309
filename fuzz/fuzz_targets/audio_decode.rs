#![no_main]
// What this target does with its bytes: f5_fuzz_harness::audio_decode (also replayed by the stable tests).
libfuzzer_sys::fuzz_target!(|data: &[u8]| f5_fuzz_harness::audio_decode(data));
