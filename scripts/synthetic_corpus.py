"""A synthetic Korean-English-like parallel corpus of any size, for measuring the data pipeline at scale.

Not a translation task: what matters is that the text costs what real text costs. Korean lines are eojeol (1-4
Hangul syllables, often with a particle) and end in a verb ending; English lines are Zipf-distributed words
with punctuation. English lengths follow a log-normal (median 10 words, long tail to 80: the shape of AI Hub's
and OPUS's corpora), Korean eojeol counts ~0.75 of the English word count. A few percent of the training pairs are
exact duplicates and a few hundred repeat a dev or test pair, so de-duplication and overlap removal have work.
Everything is drawn from a seeded generator: the same arguments give the same files.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

import numpy as np

_PARTICLES = ["은", "는", "이", "가", "을", "를", "에", "에서", "의", "도", "로", "와", "과", "한테", "까지"]
_ENDINGS = ["다.", "요.", "니다.", "까?", "어요.", "았다.", "겠어요.", "죠?"]
_FUNCTION = ["the", "a", "of", "to", "is", "and", "in", "I", "you", "it", "that", "for", "on", "was", "with"]
_LETTERS = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
_LETTER_P = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0, 2.0,
                      1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1])


def _zipf_p(n: int, s: float = 1.1) -> np.ndarray:
    p = 1.0 / (np.arange(n) + 2.7) ** s
    return p / p.sum()


def _ko_lexicon(rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` eojeol: 1-4 syllables from the 2,000 most common-looking ones, half with a particle."""
    syllables = [chr(0xAC00 + int(c)) for c in rng.choice(11172, size=2000, replace=False)]
    syl_p = _zipf_p(len(syllables), 0.9)
    words = []
    for length, particle in zip(rng.integers(1, 5, size=n), rng.random(n)):
        w = "".join(syllables[i] for i in rng.choice(len(syllables), size=length, p=syl_p))
        words.append(w + _PARTICLES[int(particle * 30) % len(_PARTICLES)] if particle < 0.5 else w)
    return np.array(words, dtype=object)


def _en_lexicon(rng: np.random.Generator, n: int) -> np.ndarray:
    """Function words first (the most frequent ranks), then letter strings of 2-12 letters."""
    lengths = np.clip(rng.poisson(5, size=n), 2, 12)
    letters = rng.choice(_LETTERS, size=int(lengths.sum()), p=_LETTER_P / _LETTER_P.sum())
    words, pos = list(_FUNCTION), 0
    for length in lengths[len(_FUNCTION):]:
        words.append("".join(letters[pos:pos + length]))
        pos += length
    return np.array(words, dtype=object)


def _sentences(rng: np.random.Generator, n: int, ko: np.ndarray, en: np.ndarray):
    """`n` (Korean, English) lines."""
    en_len = np.clip(np.rint(rng.lognormal(np.log(10), 0.55, size=n)), 1, 80).astype(np.int64)
    ko_len = np.clip(np.rint(en_len * 0.75 + rng.normal(0, 1, size=n)), 1, 60).astype(np.int64)
    ko_ids = rng.choice(len(ko), size=int(ko_len.sum()), p=_zipf_p(len(ko)))
    en_ids = rng.choice(len(en), size=int(en_len.sum()), p=_zipf_p(len(en)))
    ko_words, en_words = ko[ko_ids], en[en_ids]
    ko_end, ko_off, en_off = rng.integers(0, len(_ENDINGS), size=n), np.cumsum(ko_len), np.cumsum(en_len)
    for i in range(n):
        k = " ".join(ko_words[ko_off[i] - ko_len[i]:ko_off[i]]) + _ENDINGS[ko_end[i]]
        e = " ".join(en_words[en_off[i] - en_len[i]:en_off[i]])
        yield k, e[:1].upper() + e[1:] + ("?" if ko_end[i] in (3, 7) else ".")


def write_corpus(out_dir: Path, pairs: int, seed: int = 1, held_out: int = 3000, chunk: int = 100_000) -> Dict:
    """train/dev/test .ko/.en files under `out_dir` (train: `pairs` lines); reused when `out_dir` holds files of
    the same arguments. Returns their paths and what was injected."""
    out_dir = Path(out_dir)
    spec = {"pairs": pairs, "seed": seed, "held_out": held_out, "version": 1}
    files = {f"{split}_{side}": str(out_dir / f"{split}.{lang}") for split in ("train", "dev", "test")
             for side, lang in (("src", "ko"), ("tgt", "en"))}
    done = out_dir / "corpus.json"
    if done.is_file() and json.loads(done.read_text()).get("spec") == spec:
        return json.loads(done.read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ko, en = _ko_lexicon(rng, 50_000), _en_lexicon(rng, 50_000)
    held = list(_sentences(rng, 2 * held_out, ko, en))
    for split, rows in (("dev", held[:held_out]), ("test", held[held_out:])):
        for lang, col in (("ko", 0), ("en", 1)):
            (out_dir / f"{split}.{lang}").write_text("".join(r[col] + "\n" for r in rows), encoding="utf-8")
    dup = overlap = 0
    with open(files["train_src"], "w", encoding="utf-8") as fk, open(files["train_tgt"], "w", encoding="utf-8") as fe:
        recent = []
        for start in range(0, pairs, chunk):
            for k, e in _sentences(rng, min(chunk, pairs - start), ko, en):
                r = rng.random()
                if r < 0.03 and recent:          # an exact duplicate of an earlier pair
                    k, e = recent[int(r * 1e6) % len(recent)]
                    dup += 1
                elif r > 0.9999:                 # a dev or test pair leaked into training
                    k, e = held[int((r - 0.9999) * 1e8) % len(held)]
                    overlap += 1
                elif len(recent) < 10_000:
                    recent.append((k, e))
                fk.write(k + "\n")
                fe.write(e + "\n")
    info = {"spec": spec, "files": files, "duplicates": dup, "held_out_overlap": overlap}
    done.write_text(json.dumps(info, indent=1) + "\n")
    return info
