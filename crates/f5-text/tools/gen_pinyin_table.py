#!/usr/bin/env python3
"""Generate the compressed pinyin table embedded in f5-text.

Run with the reference Python environment (pypinyin 0.55.0 installed):

    python crates/f5-text/tools/gen_pinyin_table.py [--out-dir crates/f5-text/data]

It writes
  * pinyin-table.zlib     the table below, zlib-compressed (level 9)
  * PYPINYIN-LICENSE.txt  the MIT licence of pypinyin, whose dictionaries these are

The table is a UTF-8 text file:

    f5-pinyin-table 1
    pypinyin <version>
    states <N>
    <tone3 output>\t<flags>\t<rt> <r32> <r42> <sub4> <sub1>     (N lines)
    chars <C>
    <code point delta>\t<state>                                  (C lines, ascending)
    phrases <P>
    <phrase>[\t<position>=<state> ...]                           (P lines, code-point order)
    end

A "state" is one tone-marked syllable exactly as pypinyin holds it during
conversion. The tone-sandhi rules of pypinyin rewrite a syllable by turning it
into the TONE2 spelling, editing the digits, and turning it back; the
transitions are computed here with pypinyin's own functions, over the closure
of every dictionary reading, so the Rust side never re-implements pypinyin's
spelling conversions:

  flags  bit 0: '3' occurs in the TONE2 spelling; bit 1: '4' occurs in it
  rt     the syllable after a round trip TONE -> TONE2 -> TONE, unedited
  r32    after replacing every '3' by '2' in the TONE2 spelling
  r42    after replacing every '4' by '2'
  sub4   after replacing every digit by '4'
  sub1   after replacing every digit by '1'
  tone3  the final Style.TONE3 spelling of the syllable (what lazy_pinyin returns)

chars maps a code point to the state of its FIRST reading (lazy_pinyin uses only
that one); phrases maps each phrase of the phrase dictionary to the state of the
first reading of each of its characters, listing only the positions (0-based,
in characters) whose reading differs from the character's own first reading.
"""

import argparse
import os
import re
import zlib

import pypinyin
from pypinyin import Style
from pypinyin.constants import PHRASES_DICT, PINYIN_DICT
from pypinyin.contrib.tone_convert import tone2_to_tone, tone_to_tone2
from pypinyin.converter import UltimateConverter

EXPECTED_PYPINYIN = "0.55.0"
_DIGIT = re.compile(r"\d")


def main():
    parser = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out-dir", default=os.path.join(here, "..", "data"))
    args = parser.parse_args()

    if pypinyin.__version__ != EXPECTED_PYPINYIN:
        raise SystemExit(f"pypinyin {EXPECTED_PYPINYIN} required, found {pypinyin.__version__}")

    converter = UltimateConverter(tone_sandhi=True)

    def tone3(syllable):
        return converter.convert_style("", syllable, style=Style.TONE3, strict=True)

    ops = [
        lambda t2: t2,
        lambda t2: t2.replace("3", "2"),
        lambda t2: t2.replace("4", "2"),
        lambda t2: _DIGIT.sub("4", t2),
        lambda t2: _DIGIT.sub("1", t2),
    ]

    index = {}
    states = []

    def state_of(syllable):
        found = index.get(syllable)
        if found is None:
            found = len(states)
            index[syllable] = found
            states.append(syllable)
        return found

    char_rows = []
    for code_point in sorted(PINYIN_DICT):
        first = PINYIN_DICT[code_point].split(",")[0]
        char_rows.append((code_point, state_of(first)))

    char_state = {chr(code_point): state for code_point, state in char_rows}
    phrase_rows = []
    for phrase in sorted(PHRASES_DICT):
        readings = PHRASES_DICT[phrase]
        if len(readings) != len(phrase):
            raise SystemExit(f"phrase {phrase!r} has {len(readings)} readings for {len(phrase)} characters")
        overrides = []
        for position, (char, item) in enumerate(zip(phrase, readings)):
            state = state_of(item[0])
            if char_state.get(char) != state:
                overrides.append(f"{position}={state}")
        phrase_rows.append((phrase, overrides))

    # Close the state set under the sandhi edits.
    transitions = []
    cursor = 0
    while cursor < len(states):
        syllable = states[cursor]
        t2 = tone_to_tone2(syllable)
        transitions.append([state_of(tone2_to_tone(op(t2))) for op in ops])
        cursor += 1

    lines = [
        "f5-pinyin-table 1",
        f"pypinyin {pypinyin.__version__}",
        f"states {len(states)}",
    ]
    for syllable, moves in zip(states, transitions):
        out = tone3(syllable)
        t2 = tone_to_tone2(syllable)
        flags = (1 if "3" in t2 else 0) | (2 if "4" in t2 else 0)
        for text in (out,):
            if any(c in text for c in "\t\n\r "):
                raise SystemExit(f"unexpected separator in {text!r}")
        lines.append(f"{out}\t{flags}\t{' '.join(map(str, moves))}")
    lines.append(f"chars {len(char_rows)}")
    previous = 0
    for code_point, state in char_rows:
        lines.append(f"{code_point - previous}\t{state}")
        previous = code_point
    lines.append(f"phrases {len(phrase_rows)}")
    for phrase, overrides in phrase_rows:
        if any(c in phrase for c in "\t\n\r"):
            raise SystemExit(f"unexpected separator in phrase {phrase!r}")
        lines.append(f"{phrase}\t{' '.join(overrides)}" if overrides else phrase)
    lines.append("end")
    text = ("\n".join(lines) + "\n").encode("utf-8")

    os.makedirs(args.out_dir, exist_ok=True)
    table_path = os.path.join(args.out_dir, "pinyin-table.zlib")
    with open(table_path, "wb") as f:
        f.write(zlib.compress(text, 9))

    from importlib import metadata

    dist = metadata.distribution("pypinyin")
    licence = None
    for entry in dist.files or []:
        if os.path.basename(str(entry)).upper().startswith("LICENSE"):
            licence = entry.read_text(encoding="utf-8")
            break
    if licence is None:
        raise SystemExit("pypinyin licence text not found in its distribution")
    with open(os.path.join(args.out_dir, "PYPINYIN-LICENSE.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(
            "The pinyin tables in pinyin-table.zlib are generated from the dictionaries of\n"
            f"pypinyin {pypinyin.__version__} (https://github.com/mozillazg/python-pinyin),\n"
            "distributed under the following licence.\n\n"
        )
        f.write(licence)

    print(
        f"{table_path}: {len(states)} states, {len(char_rows)} characters, {len(phrase_rows)} phrases, "
        f"{len(text)} bytes -> {os.path.getsize(table_path)} bytes compressed"
    )


if __name__ == "__main__":
    main()
