"""Tiny synthetic Korean->English task for integration tests: no downloads, fixed seed.

Source sentences are 2-6 Korean "words" of one or two syllables; the target is their romanization
(가 -> ga, 초 -> cho, ...) with the word order reversed. The words cover the subword vocabulary (a real
corpus does too), and a small model learns the task to high accuracy in well under a minute on CPU.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Tuple

_ONSETS = [("ㄱ", "g"), ("ㄴ", "n"), ("ㄷ", "d"), ("ㄹ", "r"), ("ㅁ", "m"), ("ㅂ", "b"), ("ㅅ", "s"), ("ㅈ", "j"),
           ("ㅊ", "ch"), ("ㅋ", "k"), ("ㅌ", "t"), ("ㅍ", "p"), ("ㅎ", "h")]
_VOWELS = [(0, "a"), (8, "o"), (13, "u"), (20, "i")]   # ㅏ ㅗ ㅜ ㅣ as jamo indices
_CHOSEONG = "ㄱㄲㄴㄷㄸㄹㅁㅂㅃㅅㅆㅇㅈㅉㅊㅋㅌㅍㅎ"


def syllables() -> List[Tuple[str, str]]:
    """(Hangul syllable, romanization) pairs, composed arithmetically from jamo."""
    out = []
    for onset, rom_c in _ONSETS:
        for v, rom_v in _VOWELS:
            code = 0xAC00 + (_CHOSEONG.index(onset) * 21 + v) * 28
            out.append((chr(code), rom_c + rom_v))
    return out


def make_pairs(n: int, seed: int, min_len: int = 2, max_len: int = 6, reverse: bool = True) -> List[Tuple[str, str]]:
    rng = random.Random(seed)
    syl = syllables()
    pairs = []
    for _ in range(n):
        words = []
        for _ in range(rng.randint(min_len, max_len)):
            parts = [rng.choice(syl) for _ in range(rng.randint(1, 2))]
            words.append(("".join(k for k, _ in parts), "".join(r for _, r in parts)))
        tgt = [r for _, r in (reversed(words) if reverse else words)]
        pairs.append((" ".join(k for k, _ in words), " ".join(tgt)))
    return pairs


def write_task(root: Path, n_train: int = 1200, n_dev: int = 40, n_test: int = 40, seed: int = 7,
               reverse: bool = True) -> Dict[str, str]:
    """Write train/dev/test .ko/.en files under `root`; returns the DataConfig fields pointing at them."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, n, s in (("train", n_train, seed), ("dev", n_dev, seed + 1), ("test", n_test, seed + 2)):
        pairs = make_pairs(n, s, reverse=reverse)
        for side, lang, col in (("src", "ko", 0), ("tgt", "en", 1)):
            path = root / f"{split}.{lang}"
            path.write_text("".join(p[col] + "\n" for p in pairs), encoding="utf-8")
            files[f"{split}_{side}"] = str(path)
    return files
