"""Writes nfc.json: texts with long runs of combining marks ("zalgo" text)
and their NFC as Python's unicodedata computes it (full Unicode NFC, no
Stream-Safe CGJ insertion, as the tokenizers library's NFC normalizer).

Run with python3 (3.11: Unicode 14.0) from this directory:
    python3 nfc.py > nfc.json
"""
import json
import sys
import unicodedata

# Combining marks of many classes: 230 above, 220 below, 202 attached
# below, 216 attached above right, 1 overlay, 240 iota subscript, 234
# double above, 232 above right, 233 double below, 7 nukta, 9 virama.
MIXED = "\u0301\u0316\u0327\u031b\u0334\u0345\u035d\u0315\u035c\u093c\u094d\u0300\u0323\u0308\u0302"


def mixed(n):
    return "".join(MIXED[(i * 7) % len(MIXED)] for i in range(n))


texts = [
    "e" + "\u0301" * 30,
    "e" + "\u0301" * 31,
    "a" + "\u0316" * 31,
    "\u0316" * 31 + " no starter before the run",
    "e\u0301" + mixed(40),
    "e" + mixed(40) + "\u0301",
    "A\u030a" + "\u0323" * 31 + " Å then dots below",
    "\u1ec7" + mixed(35) + " precomposed ệ first",
    "o\u031b\u0323" + mixed(33),
    "\u03b1\u0313\u0301\u0345" + mixed(31),
    "\u1100\u1161\u11a8" + mixed(32) + "\uac00\u11a8",
    "\uac00\u11a8" + "\u0301" * 31,
    "\u1100" + "\u0316" * 31 + "\u1161",
    "\u0344" * 20,
    "a\u0f73" * 3 + "\u0f73" * 16,
    "z" + mixed(60),
    "z" + mixed(61),
    "z" + mixed(100),
    "Z" + mixed(1000),
    "a" + "\u0301" * 20 + "\u034f" + "\u0301" * 20,
    "a" + mixed(40) + "\u034f" + mixed(40),
    "H\u0334\u0311\u0343e\u0336\u035d" + mixed(45) + "llo w" + mixed(31) + "orld " + mixed(33) + "!",
    "zalgo: " + " ".join(c + mixed(31 + i) for i, c in enumerate("T\u00e9xt")) + " done",
    "日本" + mixed(40) + "語😀" + mixed(31) + "👍🏽",
    "line one\n" + "x" + mixed(50) + "\n\tline three 123" + mixed(31),
    "<|im_start|>user\n" + "e" + mixed(40) + "<|im_end|>",
    "<think>" + "a" + mixed(31) + "</think>",
]

cases = [{"text": t, "nfc": unicodedata.normalize("NFC", t)} for t in texts]
json.dump({"unicode": unicodedata.unidata_version, "cases": cases}, sys.stdout, ensure_ascii=False, indent=1)
sys.stdout.write("\n")
