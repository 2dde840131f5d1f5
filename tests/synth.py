"""Tiny synthetic Korean->English task for integration tests: no downloads, fixed seed.

Each source sentence is a sequence of Korean "words"; its target is the English word of each, in reverse
order. A small model learns it to high accuracy in well under a minute on CPU.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Tuple

KO = ["사과", "바다", "하늘", "학교", "친구", "고양이", "노래", "책", "나무", "강", "별", "꽃"]
EN = ["apple", "sea", "sky", "school", "friend", "cat", "song", "book", "tree", "river", "star", "flower"]


def make_pairs(n: int, seed: int, min_len: int = 2, max_len: int = 6) -> List[Tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        k = rng.randint(min_len, max_len)
        idx = [rng.randrange(len(KO)) for _ in range(k)]
        pairs.append((" ".join(KO[i] for i in idx), " ".join(EN[i] for i in reversed(idx))))
    return pairs


def write_task(root: Path, n_train: int = 600, n_dev: int = 40, n_test: int = 40, seed: int = 7) -> Dict[str, str]:
    """Write train/dev/test .ko/.en files under `root`; returns the DataConfig fields pointing at them."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, n, s in (("train", n_train, seed), ("dev", n_dev, seed + 1), ("test", n_test, seed + 2)):
        pairs = make_pairs(n, s)
        for side, lang, col in (("src", "ko", 0), ("tgt", "en", 1)):
            path = root / f"{split}.{lang}"
            path.write_text("".join(p[col] + "\n" for p in pairs), encoding="utf-8")
            files[f"{split}_{side}"] = str(path)
    return files
