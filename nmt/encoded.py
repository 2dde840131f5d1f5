"""The encoded corpus as flat numpy arrays, cached next to the tokenizers.

At millions of pairs, a list of Python ints per sentence costs ~36 bytes a token (5 million pairs: ~7 GB); here each
side is one int32 array of all token ids plus an int64 array of sentence offsets (~4 bytes a token). SentencePiece
encodes in chunks with its own threads (the GIL released), and only one chunk's lists exist at a time. Both sides
are encoded before either is saved, so that the room for the whole cache is known (and checked) first. The arrays
are saved as `encoded.<key>.<side>.{ids,offsets}.npy`, keyed by checksums of the text and of both tokenizer models,
and memory-mapped on load: a resume of the same data (or any run with the same text and tokenizer files) skips
encoding. The arrays' own sha256 sums are saved beside them (`encoded.<key>.json`) and checked on load, with their
type: a damaged cache, which would otherwise give a resumed run other batches (or ids past the vocabulary) without a
word, is encoded again.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
from pathlib import Path
from typing import IO, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from nmt import log as nmt_log
from nmt.atomic import abandoned, atomic_open, hold
from nmt.download import sha256_file
from nmt.storage import check_room, check_scratch_room

logger = logging.getLogger("nmt.data")

CHUNK = 50_000   # lines per SentencePiece call: big enough for its threads, small enough that the lists stay small


class FlatIds(Sequence):
    """Token ids of many sentences in two arrays; `flat[i]` is sentence i's ids (an int32 view, no copy)."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        if len(offsets) == 0 or offsets[-1] != len(ids):
            raise ValueError(f"offsets end at {offsets[-1] if len(offsets) else None}, not at {len(ids)} ids")
        self.ids, self.offsets = ids, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.ids[self.offsets[i]:self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per sentence (int64), without materializing any sentence."""
        return np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])


class RowsView(Sequence):
    """Rows `rows` of a FlatIds, in that order, without copying ids (the pairs kept by the length filter)."""

    def __init__(self, flat: FlatIds, rows: np.ndarray):
        self.flat, self.rows = flat, np.asarray(rows, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.flat[int(self.rows[i])]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    @property
    def lengths(self) -> np.ndarray:
        return self.flat.lengths[self.rows]


def encode_flat(tok, lines: Sequence[str], chunk: int = CHUNK) -> FlatIds:
    """`tok.encode(lines)` as one FlatIds, chunk by chunk (SentencePiece's threads encode each chunk)."""
    ids_parts, lengths_parts = [], []
    report = nmt_log.Every(nmt_log.REPORT_SECONDS)   # (millions of lines take minutes: say how far it got)
    for start in range(0, len(lines), chunk):
        if start and report.due():
            logger.info("encoding the %s side: %d of %d lines encoded so far", getattr(tok, "lang", "?"), start,
                        len(lines))
        enc = tok.encode(lines[start:start + chunk])
        lengths = np.fromiter(map(len, enc), dtype=np.int64, count=len(enc))
        ids_parts.append(np.fromiter(itertools.chain.from_iterable(enc), dtype=np.int32, count=int(lengths.sum())))
        lengths_parts.append(lengths)
        del enc
    lengths = np.concatenate(lengths_parts) if lengths_parts else np.zeros(0, np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return FlatIds(np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32), offsets)


def text_checksum(lines: Sequence[str], chunk: int = 100_000) -> str:
    """sha256 of the lines as text (newline-terminated), hashed in chunks: the corpus part of a cache key."""
    h = hashlib.sha256()
    for start in range(0, len(lines), chunk):
        h.update(("\n".join(lines[start:start + chunk]) + "\n").encode("utf-8"))
    return h.hexdigest()


def cache_key(src_lines: Sequence[str], tgt_lines: Sequence[str], src_tok, tgt_tok) -> str:
    """What the encoded arrays depend on: both texts and both tokenizer models (their files' bytes)."""
    h = hashlib.sha256()
    for part in (text_checksum(src_lines), text_checksum(tgt_lines)):
        h.update(part.encode("ascii"))
    for tok in (src_tok, tgt_tok):
        h.update(bytes.fromhex(sha256_file(Path(tok.path))))   # the same digest, hashed once per process
    return h.hexdigest()[:16]


def _paths(cache_dir: Path, key: str, side: str) -> Tuple[Path, Path]:
    return cache_dir / f"encoded.{key}.{side}.ids.npy", cache_dir / f"encoded.{key}.{side}.offsets.npy"


def _load(cache_dir: Path, key: str, side: str) -> Optional[FlatIds]:
    """The cached arrays of one side, memory-mapped; None when absent, unreadable or not of the types `_save` writes
    (then encoded again): the sums cover the arrays' bytes, not their header (a flipped bit there read the ids as
    big-endian: ids in the billions, which an embedding clips without a word)."""
    ids_path, off_path = _paths(cache_dir, key, side)
    try:
        ids, offsets = np.load(ids_path, mmap_mode="r"), np.load(off_path, mmap_mode="r")
    except Exception:   # (a damaged header: OSError, ValueError, and numpy's parse of it: SyntaxError, TokenError)
        return None
    native = [(ids, np.int32), (offsets, np.int64)]
    return FlatIds(ids, offsets) if all(a.dtype == np.dtype(t) and a.ndim == 1 for a, t in native) else None


@contextlib.contextmanager
def _written(path: Path, size: int) -> Iterator[IO]:
    """`atomic_open(path, "wb")` with its temporary file held (`nmt.atomic.hold`) until renamed into place: a live
    writer's, which `killed_writes` leaves (a --dry-run --resume writes the cache without the directory's lock)."""
    held = None
    try:
        with atomic_open(path, "wb", size=size) as f:
            held = os.dup(f.fileno())   # (its lock outlives the file's closing, which comes before the rename)
            hold(held)
            yield f
    finally:
        if held is not None:
            os.close(held)


def killed_writes(cache_dir: Path) -> List[Path]:
    """The temporary files of cache writes in `cache_dir` that were killed (kill -9, out of memory), as large as the
    arrays (no later write takes their random names); not a live writer's, nor another user's
    (`nmt.atomic.abandoned`)."""
    return [path for path in Path(cache_dir).glob(".encoded.*.tmp") if abandoned(path)]


def _save(cache_dir: Path, key: str, flats: Sequence[FlatIds], scratch: bool = False) -> int:
    """Both sides' arrays, each side's ids first and offsets last (each atomic): a side with its offsets file is
    complete. The room for all of them is checked first (in a `scratch` directory, naming TMPDIR, not --model-dir),
    and a disk that fills meanwhile asks for it too: one array's size told a user nothing of what to free (a new
    attempt writes them all again)."""
    arrays = [(path, arr) for side, flat in zip(("src", "tgt"), flats)
              for path, arr in zip(_paths(cache_dir, key, side), (flat.ids, flat.offsets))]
    whole = sum(-(-(arr.nbytes + 128) // 4096) * 4096 for _, arr in arrays) + 4096   # (.npy headers, blocks, sums)
    what = f"the encoded training corpus's arrays (encoded.{key}.*.npy)"
    if scratch:
        check_scratch_room(cache_dir, whole, what)
    else:
        check_room(cache_dir, whole, what, keep_last=False)
    for path, arr in arrays:
        with _written(path, whole) as f:
            np.save(f, arr)
    return whole


def _sums(cached: Sequence[FlatIds]) -> dict:
    """sha256 of every array of both sides (read whole: about a second for 5 million pairs)."""
    return {f"{side}.{part}": hashlib.sha256(memoryview(np.ascontiguousarray(getattr(flat, part)))).hexdigest()
            for side, flat in zip(("src", "tgt"), cached) for part in ("ids", "offsets")}


def load_or_encode(cache_dir: Path, src_tok, tgt_tok, src_lines: Sequence[str],
                   tgt_lines: Sequence[str], scratch: bool = False) -> Tuple[FlatIds, FlatIds, bool]:
    """Both sides' FlatIds from `cache_dir` if encoded before with the same text and tokenizers, else encoded,
    saved there (replacing older entries) and memory-mapped. The bool says whether the cache had them. `scratch`:
    `cache_dir` is a temporary directory in $TMPDIR (a dry run's), not the model directory."""
    cache_dir = Path(cache_dir)
    key = cache_key(src_lines, tgt_lines, src_tok, tgt_tok)
    cached, sums_path = [_load(cache_dir, key, side) for side in ("src", "tgt")], cache_dir / f"encoded.{key}.json"
    if all(c is not None for c in cached):
        try:
            saved = json.loads(sums_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = None
        if saved == _sums(cached):
            logger.info("encoded corpus: reusing %s", _paths(cache_dir, key, "src")[0].name)
            return cached[0], cached[1], True
        logger.warning("encoded corpus: %s of %s, encoding it again", "damaged: its arrays do not match the sums in "
                       f"{sums_path.name}" if saved is not None else f"no readable {sums_path.name}",
                       _paths(cache_dir, key, "src")[0].name)
    elif any(p.exists() for side in ("src", "tgt") for p in _paths(cache_dir, key, side)):   # (a save killed too)
        logger.warning("encoded corpus: encoded.%s.*.npy damaged or incomplete, encoding it again", key)
    whole = _save(cache_dir, key, [encode_flat(src_tok, src_lines), encode_flat(tgt_tok, tgt_lines)], scratch)
    for old in [*cache_dir.glob("encoded.*.npy"), *cache_dir.glob("encoded.*.json")]:
        if not old.name.startswith(f"encoded.{key}."):
            old.unlink()
    src, tgt = _load(cache_dir, key, "src"), _load(cache_dir, key, "tgt")
    sums = (json.dumps(_sums([src, tgt]), indent=1) + "\n").encode("utf-8")
    with _written(sums_path, whole) as f:   # (without it, the next run encodes and writes the whole cache again)
        f.write(sums)
    return src, tgt, False
