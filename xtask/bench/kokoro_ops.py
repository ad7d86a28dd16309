"""The kit ops Kokoro-82M adds, timed in PyTorch on Kokoro's shapes: the reference side of the
op rows of `cargo xtask bench kit` and `cargo xtask bench kokoro` (the Rust side is
`kokoro_op_times` in xtask/src/bench_kokoro.rs, same shapes)."""


def time_kokoro_ops(torch, frames, min_seconds, best_of):
    """Seconds per op for `frames` predicted frames (the short input's: 153), best of N."""
    f = frames
    ops = {}
    with torch.no_grad():
        # ISTFTNet's first upsampler: ConvTranspose1d 512→256, k20 s10 p5, input at 80 frames/s.
        up = torch.nn.ConvTranspose1d(512, 256, 20, 10, padding=5)
        x = torch.randn(1, 512, 2 * f)
        ops["conv_transpose1d"] = best_of(lambda: up(x), min_seconds)
        # A dilated resblock conv: 256 channels, k7, dilation 5, at 800 frames/s.
        conv = torch.nn.Conv1d(256, 256, 7, dilation=5, padding=15)
        y = torch.randn(1, 256, 20 * f)
        ops["conv1d_dilated"] = best_of(lambda: conv(y), min_seconds)
        # A BiLSTM 640 → 2×256 over 512 steps.
        lstm = torch.nn.LSTM(640, 256, 1, batch_first=True, bidirectional=True)
        z = torch.randn(1, 512, 640)
        ops["bilstm"] = best_of(lambda: lstm(z), min_seconds)
    return ops
