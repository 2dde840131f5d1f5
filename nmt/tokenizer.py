"""SentencePiece subword models, one per language: training, loading, text <-> ids.

Every model this module writes shares one convention, checked again on load:

* special ids PAD=0, UNK=1, BOS=2, EOS=3 (constants below; the batcher and the model rely on them);
* byte fallback, so characters never seen in training become UTF-8 byte pieces instead of <unk>;
* no SentencePiece normalization (``identity``) and whitespace kept as is. Text is NFC-normalized in Python
  instead, so ``decode(encode(x)) == unicodedata.normalize("NFC", x)`` for any string, Hangul, Hanja and emoji
  included, but for U+2581 (``▁``), SentencePiece's own mark of a word's start, which it reads as a space in any
  text, and for control characters (a tab, a line end, ESC: `nmt.text.normalize` spaces or removes them in every
  text read, so that only a model writes one, as byte pieces, which `decode` leaves out: `whole_characters`).
  (SentencePiece's default NFKC would rewrite full-width forms, circled digits ...; NFC, like NFKC, maps
  the CJK compatibility ideographs of KS X 1001 text, U+F900-U+FAFF, to their unified forms)

Models live in the model directory as ``spm.<lang>.model`` / ``spm.<lang>.vocab``, or, with ``--shared-vocab``,
as one ``spm.joint.model`` trained on both languages' text that serves as source and target tokenizer (same ids).
They are trained in a temporary directory (``nmt-spm-*.tmp`` in the system's, with the training text; one that a
killed process left is removed by the next training) and published with atomic copies, so a crash never leaves a torn
model behind.
"""
from __future__ import annotations

import logging
import os
import re
import tempfile
import unicodedata
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import sentencepiece as spm

from nmt import byte_pieces, spm_process
from nmt.atomic import atomic_copy, scratch_dir
from nmt.storage import StorageError, guarded_write, scratch_full, scratch_room

logger = logging.getLogger(__name__)

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
DROPPED_IDS = (PAD_ID, BOS_ID)   # what `decode` leaves out of a text (`dropped_pieces` counts them)
MODEL_TYPES = ("unigram", "bpe")
# Scripts with thousands of rare characters: leave the rarest 0.05% to byte fallback (SentencePiece's advice
# for CJK). Alphabetic languages keep every character as a piece.
CHARACTER_COVERAGE = {"ko": 0.9995, "ja": 0.9995, "zh": 0.9995}
DEFAULT_CHARACTER_COVERAGE = 1.0
INPUT_SENTENCE_SIZE = 500_000            # training sample cap: enough for the statistics; SentencePiece time grows
                                         # with it (both languages at 500k: 89 s on 2 shared cores)
# Threads of SentencePiece's training, whatever the machine: unigram training sums its statistics by thread, so
# the vocabulary (piece scores and ids, then every model trained on it) depends on the count. Two: the published
# models were trained on 2-core hosts, and with the sample capped (above) more threads save little.
TRAIN_THREADS = 2
# Longest training line SentencePiece takes (its most, in bytes): its default, 4,192, left out without a word every
# line over it (Korean past ~1,400 syllables, which --max-chars lets through), and failed on a text of only such lines
MAX_SENTENCE_BYTES = 1 << 30
_LANG_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_MODEL_NAME_RE = re.compile(r"^spm\.(.+)\.model$")

PathLike = Union[str, "os.PathLike[str]"]
JOINT = "joint"   # the name (spm.joint.model) of the one model of both languages (--shared-vocab)


class TokenizerError(ValueError):
    """A tokenizer model that cannot be trained, loaded or used; the message names the file or argument."""


class PieceError(TokenizerError):
    """A piece given (`piece_ids`) that is not in the vocabulary or not in its place; `field` names it: pieces[3]."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


class VocabTooSmall(TokenizerError):
    """A vocabulary size below what the text's characters need: `need` pieces at least."""
    def __init__(self, message: str, need: int):
        super().__init__(message)
        self.need = need


def tokenizer_path(model_dir: PathLike, lang: str) -> Path:
    """Path of the SentencePiece model of `lang` inside `model_dir` (``spm.<lang>.model``)."""
    _check_lang(lang)
    return Path(model_dir) / f"spm.{lang}.model"


def character_coverage(*langs: str) -> float:
    """SentencePiece's character coverage for text in `langs`: the lowest of theirs (a joint model of Korean and
    English leaves Korean's rarest characters to byte fallback, as a Korean model does)."""
    return min(CHARACTER_COVERAGE.get(lang, DEFAULT_CHARACTER_COVERAGE) for lang in langs)


def _check_lang(lang: str) -> None:
    if not isinstance(lang, str) or not _LANG_RE.match(lang):
        raise TokenizerError(f"invalid language code {lang!r}: use letters, digits, '_' or '-' (e.g. 'ko', 'en')")


class Tokenizer:
    """A loaded SentencePiece model of one language. Use `Tokenizer.load` or `train_tokenizer` to get one."""

    def __init__(self, processor: spm.SentencePieceProcessor, path: Path, lang: str):
        self._sp = processor
        self.path = path
        self.lang = lang
        # Batch encoding/decoding is parallel in C++; one thread per core, as for training.
        self._threads = os.cpu_count() or 1
        self._bytes: Optional[Dict[int, int]] = None   # byte pieces' values by id (`whole_characters`)
        self._surfaces: Optional[List[Optional[str]]] = None

    @classmethod
    def load(cls, path: PathLike, lang: Optional[str] = None) -> "Tokenizer":
        """Load a ``.model`` file written by `train_tokenizer`; `TokenizerError` if missing, corrupt or foreign.
        `lang`: the language it tokenizes (default: the one in the file name; a joint model serves either)."""
        path = Path(path)
        if not path.is_file():
            raise TokenizerError(f"{path}: SentencePiece model not found")
        try:   # (read here: SentencePiece would open the path's text as UTF-8, not as the file system names it)
            sp = spm_process.processor(path.read_bytes())
        except OSError as e:
            raise TokenizerError(f"{path}: cannot read the SentencePiece model ({e.strerror})") from None
        except RuntimeError as e:
            raise TokenizerError(f"{path}: not a readable SentencePiece model ({e})") from None
        found = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise TokenizerError(f"{path}: special ids pad/unk/bos/eos are {found}, expected "
                                 f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; retrain it with nmt.tokenizer.train_tokenizer")
        if sp.piece_to_id("<0xF0>") == sp.unk_id():
            raise TokenizerError(f"{path}: model has no byte-fallback pieces, so unseen characters would be lost; "
                                 "retrain it with nmt.tokenizer.train_tokenizer")
        m = _MODEL_NAME_RE.match(path.name)
        return cls(sp, path, lang or (m.group(1) if m else path.stem))

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def same_vocabulary(self, other: "Tokenizer") -> bool:
        """Whether both models have the same pieces with the same ids and scores (so they segment alike; the
        model files themselves differ in incidental fields such as the training file's name)."""
        a, b = self._sp, other._sp
        return a.get_piece_size() == b.get_piece_size() and all(
            a.id_to_piece(i) == b.id_to_piece(i) and a.get_score(i) == b.get_score(i)
            for i in range(a.get_piece_size()))

    def encode(self, lines: Sequence[str]) -> List[List[int]]:
        """Token ids of each line (NFC-normalized first); no BOS/EOS added."""
        lines = [self._nfc_line(line, i) for i, line in enumerate(lines)]
        return self._sp.encode(lines, out_type=int, num_threads=self._threads)

    def encode_sampled(self, lines: Sequence[str], alpha: float, seed: int) -> List[List[int]]:
        """One segmentation per line sampled from the model instead of the best one (subword regularization,
        Kudo 2018; BPE-dropout with rate `alpha` for BPE models), the same for the same `seed`. For training
        batches; SentencePiece's random seed is process-wide, so call it from one thread at a time."""
        lines = [self._nfc_line(line, i) for i, line in enumerate(lines)]
        spm.set_random_generator_seed(int(seed))
        # One more (empty) line: SentencePiece samples a one-line batch in the calling thread, whose random
        # generator the seed does not reset (measured: not reproducible), and larger ones in fresh threads.
        return self._sp.encode(lines + [""], out_type=int, enable_sampling=True, alpha=float(alpha), nbest_size=-1,
                               num_threads=1)[:-1]

    def decode(self, ids: Sequence[Sequence[int]]) -> List[str]:
        """Text of each id sequence. PAD and BOS are dropped and a sequence ends at its first EOS."""
        size = self.vocab_size
        cleaned = []
        for row, seq in enumerate(ids):
            out = []
            for tok in seq:
                tok = int(tok)
                if tok == EOS_ID:
                    break
                if tok in DROPPED_IDS:
                    continue
                if not 0 <= tok < size:
                    raise self._outside(f"decode: id {tok} in sequence {row}")
                out.append(tok)
            cleaned.append([out[i] for i in self.whole_characters(out)])
        return self._sp.decode(cleaned, num_threads=self._threads)

    def whole_characters(self, ids: Sequence[int]) -> List[int]:
        """The indices of `ids` to write: all but byte pieces that form no whole UTF-8 character (a search or a
        sample may write a lead byte, then a syllable), which SentencePiece would write as U+FFFD each, and those of
        a control character (ESC, U+0006, a line end, U+009B: an undertrained model's) or a line or paragraph
        separator (U+2028, U+2029), which no training text holds (`never_written`) and a terminal would act on
        (`nmt.byte_pieces`)."""
        return byte_pieces.written(ids, self._byte_values())

    def piece(self, token_id: int) -> str:
        """The subword piece of one id (attention plots label their axes with these)."""
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab_size:
            raise self._outside(f"piece: id {token_id}")
        return self._sp.id_to_piece(token_id)

    def piece_ids(self, pieces: Sequence[str], name: str = "pieces") -> List[int]:
        """The ids of a translation's pieces as `piece` writes them (a search's output, given back; an end of
        sentence last, as an attention's or nmt-score's pieces end, is left out: the row of the end comes last
        anyway); a PieceError naming `name`[i] (its `field`) for one not in this vocabulary, or an end of sentence
        before the last (the text ends at it). <unk>, <s> and <pad> are taken (a search may write <unk>, but no <s>
        or <pad>, `nmt.search_blocks.NeverChosen`; a caller may give them): the text shows <unk> (" ⁇ "), and drops
        <s> and <pad> (`dropped_pieces`)."""
        if isinstance(pieces, (str, bytes)) or not isinstance(pieces, Sequence):   # (bytes: one per byte)
            raise TypeError(f"{name} must be a list of pieces (strings), got {type(pieces).__name__}")
        out = []
        for i, p in enumerate(pieces):
            if not isinstance(p, str):
                raise TypeError(f"{name}[{i}] is {type(p).__name__}, not a piece (a string)")
            try:
                token_id = self._sp.piece_to_id(p)
            except TypeError:   # a lone surrogate: not UTF-8, so in no vocabulary
                token_id = None
            if token_id is None or self._sp.id_to_piece(token_id) != p:
                raise PieceError(f"{name}[{i}] {p[:40]!r} is not a piece of the {self.lang} vocabulary: give the "
                                 "pieces as a search wrote them", f"{name}[{i}]")
            if token_id == EOS_ID and i == len(pieces) - 1:
                break
            if token_id == EOS_ID:
                raise PieceError(f"{name}[{i}] is the end of sentence {p!r} before the last piece: a translation "
                                 "ends at it; send the pieces before it (its row comes last)", f"{name}[{i}]")
            out.append(token_id)
        return out

    @staticmethod
    def dropped_pieces(ids: Sequence[int]) -> int:
        """How many of a translation's `ids` are <s> or <pad>, which its text (`decode`) drops."""
        return sum(1 for i in ids if i in DROPPED_IDS)

    def _byte_values(self) -> Dict[int, int]:
        """The byte pieces' values ("<0xED>": 0xED) by id."""
        if self._bytes is None:
            sp = self._sp
            self._bytes = {i: int(sp.id_to_piece(i)[1:-1], 16) for i in range(sp.get_piece_size()) if sp.is_byte(i)}
        return self._bytes

    def never_written(self) -> List[int]:
        """Ids of the pieces of this vocabulary no training text holds: <unk> (byte fallback leaves none) and the
        bytes of control characters (the corpus reader drops them); what sampling over the whole vocabulary must not
        draw besides <pad> and <s>, which no search chooses (`nmt.search_blocks.NeverChosen` owns that ban)."""
        byte = self._byte_values()
        return [i for i in range(self.vocab_size) if self._sp.is_unknown(i) or
                byte.get(i, 0x20) < 0x20 or byte.get(i) == 0x7F]

    def surfaces(self) -> List[Optional[str]]:
        """Per id, the text its piece writes ("▁" for a space before it), None for special and byte pieces (what
        completing a word of a target prefix may use, `nmt.prefix`)."""
        if self._surfaces is None:
            sp = self._sp
            self._surfaces = [None if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or sp.is_unused(i)
                              else sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        return self._surfaces

    def piece_words(self, ids: Sequence[int]) -> Tuple[str, List[Optional[int]]]:
        """The text of `ids` (as `decode`) and, per id, the index of the whitespace-separated word of that text its
        piece begins (None: a piece of spaces alone, or a byte piece `decode` leaves out), from SentencePiece's
        offsets into the decoded text."""
        ids = [int(t) for t in ids]
        kept = self.whole_characters(ids)
        if not kept:   # SentencePiece reads [] as an empty batch
            return "", [None] * len(ids)
        proto = self._sp.decode_ids_as_immutable_proto([ids[i] for i in kept])
        text = proto.text
        word_at: List[Optional[int]] = [None] * (len(text) + 1)
        word, in_word = -1, False
        for i, ch in enumerate(text):
            if not ch.isspace():
                word += not in_word
                word_at[i] = word
            in_word = not ch.isspace()
        out: List[Optional[int]] = [None] * len(ids)
        for i, p in zip(kept, proto.pieces):   # a byte piece of a character split over several has an empty
            lead = len(p.surface) - len(p.surface.lstrip())   # surface: its begin points at that character all the same
            out[i] = word_at[p.begin + lead] if p.begin + lead < p.end or not p.surface else None
        return text, out

    def _outside(self, what: str) -> TokenizerError:
        """The error for an id (`what`: where it was found) that is not in this vocabulary."""
        return TokenizerError(f"{what} is outside the {self.lang} vocabulary (size {self.vocab_size}, {self.path})")

    def pieces(self, line: str) -> List[str]:
        """Subword pieces of one line (for inspection and logging)."""
        return self._sp.encode(self._nfc_line(line, 0), out_type=str)

    def _nfc_line(self, line, index: int) -> str:
        """`line` NFC-normalized, as the training text was (`_write_training_text`); TokenizerError for a non-str."""
        if not isinstance(line, str):
            raise TokenizerError(f"encode: item {index} is {type(line).__name__}, expected str")
        return unicodedata.normalize("NFC", line)

    def __repr__(self) -> str:
        return f"Tokenizer(lang={self.lang!r}, vocab_size={self.vocab_size}, path='{self.path}')"


def _write_training_text(lines: Sequence[str], path: Path, lang: str) -> int:
    """The non-blank `lines`, NFC-normalized, one per line in `path`; returns their count (TokenizerError if 0)."""
    n_lines = n_content = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for i, line in enumerate(lines):
            if not isinstance(line, str):
                raise TokenizerError(f"train_tokenizer({lang}): line {i} is {type(line).__name__}, expected str")
            n_lines += 1
            if line.strip():
                n_content += 1
                f.write(unicodedata.normalize("NFC", line) + "\n")
    if n_content == 0:
        raise TokenizerError(f"no training text for the {lang} tokenizer: "
                             f"{'all ' + str(n_lines) + ' lines are blank' if n_lines else 'no lines given'}")
    return n_content


def train_tokenizer(lines: Sequence[str], out_dir: PathLike, lang: str, vocab_size: int,
                    model_type: str = "unigram", seed: int = 1,
                    num_threads: Optional[int] = None, coverage: Optional[float] = None) -> Tokenizer:
    """Train a SentencePiece model on `lines` and publish it as ``out_dir/spm.<lang>.model`` (+ ``.vocab``).

    A `vocab_size` larger than the text supports is lowered to what it does support, with a warning. A
    `vocab_size` too small to hold the required characters, or text with no content, is a `TokenizerError`.
    Results are reproducible for a given seed, text and `num_threads` (default `TRAIN_THREADS` on any machine);
    unigram training sums statistics by thread, so another count can change the scores slightly. `coverage`: the
    character coverage (default: `lang`'s; see `character_coverage`).
    """
    _check_lang(lang)
    if model_type not in MODEL_TYPES:
        raise TokenizerError(f"unknown SentencePiece model type {model_type!r}; choose one of {', '.join(MODEL_TYPES)}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
        raise TokenizerError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    if isinstance(lines, str):
        raise TokenizerError("train_tokenizer: `lines` must be a sequence of strings, got a single string")
    final = tokenizer_path(out_dir, lang)
    threads = num_threads or TRAIN_THREADS

    with scratch_dir(tempfile.gettempdir(), "nmt-spm-") as tmp:   # (a killed run's text stayed there for good)
        text_file = tmp / "train.txt"
        # SentencePiece's input, in the temporary directory
        with scratch_room(tmp, f"the {lang} tokenizer's training text"), guarded_write(text_file):
            n_content = _write_training_text(lines, text_file, lang)
        prefix = tmp / "spm"
        if n_content > spm_process.IN_PROCESS_LINES:   # (minutes on millions of lines, without a word till done)
            logger.info("training the %s tokenizer on %d lines", lang, n_content)
        try:
            spm_process.train(
                seed, n_content, input=str(text_file), model_prefix=str(prefix), vocab_size=vocab_size,
                model_type=model_type, character_coverage=character_coverage(lang) if coverage is None else coverage,
                byte_fallback=True, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                normalization_rule_name="identity", remove_extra_whitespaces=False, minloglevel=2,
                # Soft limit: on small data the vocabulary stops at what the text supports instead of failing.
                hard_vocab_limit=False, max_sentence_length=MAX_SENTENCE_BYTES,
                input_sentence_size=INPUT_SENTENCE_SIZE, shuffle_input_sentence=True, num_threads=threads)
        except RuntimeError as e:
            msg = str(e)
            m = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
            if m:
                raise VocabTooSmall(
                    f"vocab_size {vocab_size} is too small for the {lang} tokenizer: its characters and the 256 "
                    f"byte-fallback pieces need at least {m.group(2)}; raise --vocab-size", int(m.group(2))) from None
            if "Write" in msg:   # (its model and vocabulary, written in $TMPDIR: a full disk has no errno there)
                what = f"the {lang} tokenizer SentencePiece writes there ({msg.strip()})"
                raise StorageError(scratch_full(tmp, what)) from None
            raise TokenizerError(f"SentencePiece training of the {lang} tokenizer failed: {msg}") from None
        # Publish the vocab first: the .model file is the marker of a finished model for load_or_train_tokenizer.
        atomic_copy(tmp / "spm.vocab", final.with_suffix(".vocab"))
        atomic_copy(tmp / "spm.model", final)

    tok = Tokenizer.load(final)
    if tok.vocab_size < vocab_size:
        logger.warning("%s tokenizer: vocab_size %d is more than the training text supports (%d lines); "
                       "using %d pieces", lang, vocab_size, n_content, tok.vocab_size)
    logger.info("trained %s", tok)
    return tok


def load_or_train_tokenizer(out_dir: PathLike, lang: str,
                            lines: Union[Sequence[str], Callable[[], Sequence[str]]],
                            vocab_size: int, model_type: str = "unigram",
                            coverage: Optional[float] = None) -> Tokenizer:
    """Load ``out_dir/spm.<lang>.model`` if it exists, else train it on `lines` (see `train_tokenizer`).

    `lines` may be a callable returning the lines, so a resumed run does not have to read the corpus.
    """
    path = tokenizer_path(out_dir, lang)
    if path.exists():
        tok = Tokenizer.load(path)
        logger.info("reusing %s", tok)
        return tok
    if callable(lines):
        lines = lines()
    return train_tokenizer(lines, out_dir, lang, vocab_size, model_type=model_type, coverage=coverage)


def tokenizer_names(src_lang: str, tgt_lang: str, shared: bool = False) -> Tuple[str, str]:
    """The names of the source and target models' files (``spm.joint.model`` twice with `shared`)."""
    src, tgt = (JOINT, JOINT) if shared else (src_lang, tgt_lang)
    return tokenizer_path("", src).name, tokenizer_path("", tgt).name


def load_tokenizers(model_dir: PathLike, src_lang: str, tgt_lang: str,
                    shared: bool = False) -> Tuple[Tokenizer, Tokenizer]:
    """The source and target SentencePiece models saved in a model directory; with `shared`, the joint model as
    both (same pieces, same ids), each knowing its language."""
    src_name, tgt_name = tokenizer_names(src_lang, tgt_lang, shared)
    return (Tokenizer.load(Path(model_dir) / src_name, lang=src_lang),
            Tokenizer.load(Path(model_dir) / tgt_name, lang=tgt_lang))
