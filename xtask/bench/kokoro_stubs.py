"""Import this before `kokoro`: its __init__ imports the text pipeline (misaki, spaCy,
phonemizer) and custom_stft imports attrs, none of which inference uses; empty modules stand in
for them so the reference model loads in a venv with torch, transformers and kokoro alone."""
import sys
import types

for name in ["attr", "misaki", "misaki.en", "misaki.espeak"]:
    sys.modules.setdefault(name, types.ModuleType(name))
sys.modules["attr"].attr = None
sys.modules["misaki.en"].MToken = type("MToken", (), {})
sys.modules["misaki"].en = sys.modules["misaki.en"]
sys.modules["misaki"].espeak = sys.modules["misaki.espeak"]
