"""The reference side of `cargo xtask bench text`: f5-tts's convert_char_to_pinyin + vocab lookup
on the same text, line by line, best of N; one JSON object on stdout."""
import json
import sys
import time

from f5_tts.model.utils import convert_char_to_pinyin, get_tokenizer

path, vocab_path, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = open(path, encoding="utf-8").read().split("\n")
vocab, _ = get_tokenizer(vocab_path, "custom")
best = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    for line in lines:
        tokens = convert_char_to_pinyin([line])[0]
        [vocab.get(t, 0) for t in tokens]
    best = min(best, time.perf_counter() - t0)
json.dump({"seconds": best}, sys.stdout)
