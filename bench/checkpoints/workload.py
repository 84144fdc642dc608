"""The benchmark's deterministic conversation: ~500-character prose turns."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

PAYLOAD_CHARS = 500

# Pseudo-English: an 8,000-word syllable vocabulary drawn with a Zipf-like law,
# capitals, punctuation and numbers. It compresses like English prose (gzip
# ~2.6x; English documentation measured ~2.3x), which matters on PostgreSQL,
# whose TOAST compression shrinks full mode's large blobs but not delta's
# small writes. A tiny vocabulary (first draft: gzip 4.3x) flattered full mode.
_ONSETS = [*"bcdfghjklmnprstvwyz", "br", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "str", "th", "tr"]
_ONSETS += ["ch", "sp", "sc", "wh", "", "", ""]
_VOWELS = ["a", "e", "i", "o", "u", "ea", "ai", "ou", "ie", "oo", "y"]
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck", "m", "rt", "x"]
_ZIPF_EXPONENT = 0.8


def _vocabulary(size: int = 8000) -> tuple[list[str], list[float]]:
    rng = random.Random(11)
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.choice([1, 1, 1, 2, 2, 2, 3])
        words.add("".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)))
    vocabulary = sorted(words)
    rng.shuffle(vocabulary)
    cumulative, total = [], 0.0
    for rank in range(len(vocabulary)):
        total += 1 / (rank + 1) ** _ZIPF_EXPONENT
        cumulative.append(total)
    return vocabulary, cumulative


VOCABULARY, CUMULATIVE_WEIGHTS = _vocabulary()


def _sentence_words(rng: random.Random, count: int) -> list[str]:
    words, start = [], True
    for word in rng.choices(VOCABULARY, cum_weights=CUMULATIVE_WEIGHTS, k=count):
        if rng.random() < 0.03:
            word = str(rng.randint(2, 2048))
        if start:
            word, start = word.capitalize(), False
        if rng.random() < 0.08:
            word += rng.choice([",", ",", ".", ".", ";", "?"])
            start = word[-1] in ".?"
        words.append(word)
    return words


def human_text(turn: int, chars: int = PAYLOAD_CHARS) -> str:
    """Return turn ``turn``'s human message: pseudo-English prose of exactly ``chars`` characters."""
    rng = random.Random(turn)
    text = f"Turn {turn}."
    while len(text) < chars:
        text += " " + " ".join(_sentence_words(rng, 40))
    return text[:chars]


def expected_messages(turns: int) -> list[tuple[str, str]]:
    """Return the (type, content) list the demo agent's thread holds after ``turns`` turns."""
    out: list[tuple[str, str]] = []
    for turn in range(turns):
        text = human_text(turn)
        out += [("human", text), ("ai", f"echo: {text}")]
    return out


def digest(messages: list[Any]) -> str:
    """Return a short digest of (type, content) pairs from wire (dict) messages."""
    pairs = [(m["type"], m["content"]) for m in messages]
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]


def expected_digest(turns: int) -> str:
    return digest([{"type": t, "content": c} for t, c in expected_messages(turns)])


def estimated_full_bytes(turns: int, chars: int = PAYLOAD_CHARS) -> int:
    """Estimate the cumulative message payload full mode stores (3 checkpoints per turn).

    Every checkpoint holds the whole list (~2k messages of ~chars+200 bytes at
    turn k): about 3 × (chars + 200) × turns² bytes. Measured 81 MB at N = 200
    on SQLite for 500-character turns (reference/stack.md), the estimate says 84 MB.
    """
    return 3 * (chars + 200) * turns * turns
