"""Inference: `Translator.from_dir(path).translate(lines)`, used by the script, evaluation and notebooks alike.
On several devices (`from_dir(path, ctx=[...])`) each device decodes its share of the length-sorted batches.

Streaming a large input through it in chunks and the interactive prompt live in `nmt.stream`; scoring test sets and
scores.json in `nmt.scoring`.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Set, Tuple, Union

import mxnet as mx
import numpy as np

from nmt import manifest
from nmt.api_inputs import check_line, check_lines, checked_decode, checked_translation_ids, listed
from nmt.batching import pad_sources
from nmt.config import CHARS_PER_TOKEN, Config, DecodeConfig
from nmt.corpus import line_list
from nmt.members import checked_members, distinct_devices, load_members, members_sha256, model_files
from nmt.models.base import Seq2SeqModel
from nmt.models.ensemble import as_model, models_in
from nmt.parallel import check_gpus, concurrent_devices_safe
from nmt.prefix import WORD_START, ends_in_word, one_prefix, split_last_word, word_table
from nmt.search import beam_search, check_beam_args, greedy_search, length_limits, reached_limit, search_too_wide
from nmt.search_blocks import TargetPrefix
from nmt.text import normalize, tidy_translation
from nmt.tokenizer import Tokenizer

logger = logging.getLogger("nmt.translate")

Hyps = List[Tuple[List[int], float]]
SOURCE = "input line"   # what a cut source is called in warnings and in `unreported`'s list (a prefix: otherwise)


class Translator:
    """Batched, length-sorted translation with greedy or beam search. Output order = input order; an empty
    input line gives an empty output line."""
    # what a warning says after the count of `bytes_left_out` (nmt-translate's, the service's)
    LEFT_OUT = ("byte piece(s) left out of the translation(s): UTF-8 bytes that form no whole character (SentencePiece "
                "would write U+FFFD for each) or a control character or line separator (a terminal would act on it)")

    def __init__(self, net, src_tok: Tokenizer, tgt_tok: Tokenizer, decode: DecodeConfig, ctx: mx.Context = None,
                 warn_cut_off: bool = True):
        self.src_tok, self.tgt_tok, self.decode = src_tok, tgt_tok, decode
        self.ctx = ctx or mx.cpu()
        self.truncated = 0          # lines cut to decode.max_input_tokens (or its character guard) so far
        self.cut_off = 0            # translations that reached their length limit (max_len_a, max_len_b) so far
        self.left_out = 0           # lines whose translations' text left out byte pieces (`bytes_left_out`) so far
        self.warn_cut_off = warn_cut_off   # a warning naming their lines (not at validations: early on most are)
        self.model_dir: Optional[Path] = None
        self.checkpoint: Optional[str] = None      # "best", "latest", "avg" or a step number
        self.params_file: Optional[Path] = None
        self.params_step = self.params_sha256 = None   # the training step and sha256 of those parameters, if known
        self.config: Optional[Config] = None
        self.members = [net]        # the models that decode together (more than one: an ensemble)
        self.member_dirs: List[Path] = []   # model directories of members[1:]
        self.member_steps: List[Optional[int]] = []   # and the steps of their parameters, if known
        self.replicas: List[Tuple[mx.Context, list]] = []   # further devices, a copy of the members and thread each
        self._concurrent: Optional[bool] = None   # whether the devices may run at once (decided on first use)
        # Held while the models compute: calls from several threads take turns (two building a graph at once fail).
        self.lock = threading.RLock()
        self.sample: Optional[int] = None   # draw translations from the top `sample` tokens (0: all), no search
        self._unreported = threading.local()   # `unreported`'s list of cut lines on this thread, while it runs

    @contextmanager
    def unreported(self):
        """For lines reported once already (or to be): within it, this thread's cut inputs and translations at their
        length limit are neither warned of nor counted; the yielded list gets (what, line number) of each cut."""
        outer, self._unreported.cut = getattr(self._unreported, "cut", None), []
        try:
            yield self._unreported.cut
        finally:
            self._unreported.cut = outer

    def _report_cut(self, what: str, line: int, count: bool, message: str, *args) -> None:
        """`what` `line` (an "input line", a "target prefix of line") was cut: a warning "<what> <line> <message>"
        and (if `count`) one more `truncated`, or within `unreported` (what, line) in its list."""
        cut = getattr(self._unreported, "cut", None)
        if cut is not None:
            cut.append((what, line))
            return
        self.truncated += count
        logger.warning("%s %d " + message, what, line, *args)

    @property
    def net(self):
        """The first (or only) model: the one a Trainer updates and attention plots show."""
        return self.members[0]

    @classmethod
    def from_dir(cls, model_dir, which: str = "best", ctx: Union[mx.Context, Sequence[mx.Context], None] = None,
                 decode: Optional[DecodeConfig] = None, ensemble: Sequence = ()) -> "Translator":
        """Everything comes from the model directory: config, both SentencePiece models, parameters.

        `which` is best, latest, avg or a step number; `decode` replaces the model's saved DecodeConfig.
        `ctx`: a device, or several: the model is loaded on each and the length-sorted batches are shared out
        among them (on CPU contexts they run side by side only with OMP_NUM_THREADS = cores / contexts; see
        `nmt.parallel.concurrent_devices_safe`).
        `ensemble`: further model directories (same languages and vocabularies, any architecture) whose
        `which` checkpoints decode together with this one, following the mean of their log-probabilities; each model
        once (a directory given twice, a copy or an export of the same checkpoint: `CheckpointError`)."""
        if isinstance(ensemble, (str, Path)) or not isinstance(ensemble or (), Iterable):   # (a str: one per character)
            raise TypeError("ensemble must be a list of model directories, " + (f"not one ({str(ensemble)!r}): give "
                            "[dir]" if isinstance(ensemble, (str, Path)) else f"got {type(ensemble).__name__}"))
        ensemble = list(ensemble or ())   # an iterator (Path.glob) read once, not emptied by the checks
        manifest.check_which(which)   # (before any file is read)
        for name, d in [("model_dir", model_dir)] + [(f"ensemble[{i}]", e) for i, e in enumerate(ensemble or ())]:
            if not isinstance(d, (str, os.PathLike)):
                raise TypeError(f"{name} must be a model directory (str or Path), got {type(d).__name__}")
        decode = None if decode is None else checked_decode(decode)
        model_dir, ensemble = Path(model_dir).expanduser(), [Path(e).expanduser() for e in ensemble or ()]
        cfg, src_tok, tgt_tok = model_files(model_dir)
        decode = decode or dataclasses.replace(cfg.decode)   # a copy: a change of tr.decode is not the model's
        ctxs = list(ctx) if isinstance(ctx, (list, tuple)) else [ctx or mx.cpu()]
        if not ctxs:
            raise ValueError("Translator.from_dir: ctx is an empty list of devices")
        check_gpus(ctxs)   # else a missing GPU would look like parameters that do not fit the model
        distinct_devices(ctxs)
        others = checked_members(model_dir, src_tok, tgt_tok, ensemble, str(which))   # (before any model loads)
        infos, loaded = load_members([(model_dir, cfg)] + others, str(which), src_tok, tgt_tok, ctxs)
        tr = cls(loaded[0][1][0], src_tok, tgt_tok, decode, ctx=ctxs[0])
        tr.model_dir, tr.checkpoint, tr.config = model_dir.absolute(), str(which), cfg   # whatever chdir follows
        tr.params_file, tr.params_step = tr.model_dir / str(infos[0]["params_file"]), infos[0]["step"]
        tr.params_sha256 = members_sha256([i["sha256"] for i in infos])   # (an ensemble's: of every member's)
        tr.member_steps = [i["step"] for i in infos[1:]]
        tr.members, tr.member_dirs, tr.replicas = loaded[0][1], [d.absolute() for d, _ in others], loaded[1:]
        return tr

    @property
    def ctxs(self) -> List[mx.Context]:
        """The devices this translator decodes on."""
        return [self.ctx] + [c for c, _ in self.replicas]

    src_lang = property(lambda self: self.src_tok.lang, doc="the source language's code (ko or en)")
    tgt_lang = property(lambda self: self.tgt_tok.lang, doc="the target language's code")

    def __repr__(self) -> str:
        """What a notebook shows: the model directory, checkpoint (and step), direction and devices, and the
        ensemble's further members and the sampling size when it has them: Translator('/path/to/model',
        checkpoint='best', step 600, ko->en, ctx=[cpu(0)])."""
        further = [repr(str(d)) for d in self.member_dirs] + [   # (an ensemble built in memory: its models' classes)
            f"<a {type(m).__name__} in memory>" for m in models_in(self.members)[1 + len(self.member_dirs):]]
        extra = (f", ensemble=[{', '.join(further)}]" if further else "") + (
            f", sample={self.sample!r}" if self.sample is not None else "")
        model = "<a model in memory>" if self.model_dir is None else repr(str(self.model_dir))
        step = f", step {self.params_step}" if self.params_step is not None else ""
        return (f"Translator({model}, checkpoint={self.checkpoint!r}{step}, {self.src_lang}->{self.tgt_lang}, "
                f"ctx={self.ctxs}{extra})")

    def source_ids(self, lines: Iterable[str], first_line: int = 1, arg: str = "lines",
                   cut: Optional[Set[int]] = None) -> List[List[int]]:
        """Normalized, tokenized, length-limited source ids (warnings name line first_line + index; errors, `arg`).
        `cut` gets the indices of the lines cut, each counted once in `truncated` (those in it already: not again)."""
        checked_decode(self.decode)
        cut = set() if cut is None else cut
        return self._ids(self.src_tok, self._texts(lines, first_line, SOURCE, arg, cut), first_line, SOURCE, cut)

    def target_prefixes(self, prefixes: Optional[Sequence[Optional[str]]], first_line: int = 1,
                        cut: Optional[Set[int]] = None) -> Optional[List[Optional[TargetPrefix]]]:
        """Target prefixes (None or "": none) as the search takes them, normalized and length-limited as sources
        are (`cut` as `source_ids`'); a prefix that does not end with a space leaves its last word to be completed."""
        if prefixes is None:
            return None
        if isinstance(prefixes, str):
            raise TypeError(f"prefixes must be a list with one prefix per line, not one string ({prefixes[:40]!r})")
        raw = ["" if p is None else p for p in prefixes] if listed(prefixes) else prefixes   # (else _texts says why)
        what, cut = "target prefix of line", set() if cut is None else cut
        texts = self._texts(raw, first_line, what, "prefixes", cut)
        fits = [len(x) <= self.decode.max_input_tokens for x in self.tgt_tok.encode(texts)]
        parts = [split_last_word(t) if t and ends_in_word(r) and ok else (t, "")
                 for r, t, ok in zip(raw, texts, fits)]
        heads = self._ids(self.tgt_tok, [head for head, _ in parts], first_line, what, cut)
        out: List[Optional[TargetPrefix]] = []
        for text, head, (_, word), ok in zip(texts, heads, parts, fits):
            # the last word to complete, or (after a space) a word to begin; a cut prefix: its pieces alone
            table = word_table(self.tgt_tok.surfaces(), WORD_START + word, may_end=not word) if text and ok else None
            if word and table is None:   # no pieces spell it but byte pieces: its own pieces, as they are
                head = self._ids(self.tgt_tok, [text], first_line, what, set())[0]
            out.append(TargetPrefix(head, *table) if table else TargetPrefix(head) if head else None)
        return out

    def _texts(self, lines: Iterable[str], first_line: int, what: str, arg: str, cut: Set[int]) -> List[str]:
        """Lines checked, cut to the character guard (counted unless in `cut`; added to it) and normalized."""
        check_lines(lines, arg, first_line)
        limit = self.decode.max_input_tokens
        max_chars = limit * CHARS_PER_TOKEN
        texts = []
        for i, x in enumerate(lines):
            check_line(x, arg, i)
            x = normalize(x)   # then cut (4,000 spaces before a text are no part of it), before tokenizing
            if len(x) > max_chars:   # bounded work and memory for any line
                self._report_cut(what, first_line + i, i not in cut, "has %d characters; truncated to %d "
                                 "(--max-input-tokens %d x %d)", len(x), max_chars, limit, CHARS_PER_TOKEN)
                x = x[:max_chars].rstrip()
                cut.add(i)
            texts.append(x)
        return texts

    def _ids(self, tok: Tokenizer, texts: List[str], first_line: int, what: str, cut: Set[int]) -> List[List[int]]:
        """Normalized texts tokenized and cut to max_input_tokens, with a warning naming the line (counted in
        `truncated` unless its index is in `cut`, cut already; added to it)."""
        limit = self.decode.max_input_tokens
        ids = tok.encode(texts)
        for i, x in enumerate(ids):
            if len(x) > limit:
                self._report_cut(what, first_line + i, i not in cut, "has %d subword tokens; truncated to %d "
                                 "(--max-input-tokens)", len(x), limit)
                cut.add(i)
                ids[i] = x[:limit]
        return ids

    def translate_ids(self, lines: Iterable[str], beam_size: Optional[int] = None, nbest: int = 1,
                      first_line: int = 1, prefixes: Optional[Sequence[Optional[str]]] = None) -> List[Hyps]:
        """Per input line, up to `nbest` (target ids, normalized log-probability), best first ([]: empty line).
        `prefixes`: per line, text its translations must start with (None or "": none; see `nmt.search`)."""
        return self._searched(lines, beam_size, nbest, first_line, prefixes)[1]

    def _searched(self, lines, beam_size, nbest, first_line, prefixes) -> Tuple[List[List[int]], List[Hyps]]:
        """The source ids of `lines` and their hypotheses (`translate_ids`' arguments)."""
        beam, cut = self._beam(beam_size), set()   # the lines cut (source, prefix or both): each counted once
        self.check_search(beam, nbest)
        src = self.source_ids(lines, first_line, cut=cut)
        ids = self.target_prefixes(prefixes, first_line, cut)
        if ids is not None and len(ids) != len(src):
            raise ValueError(f"prefixes has {len(ids)} items for {len(src)} lines: give one per line (None or \"\" "
                             "for none)")
        return src, self.search_ids(src, beam, nbest, ids, first_line)

    def search_ids(self, ids: List[List[int]], beam: int, nbest: int,
                   prefixes: Optional[List[Optional[TargetPrefix]]] = None, first_line: int = 1) -> List[Hyps]:
        """`translate_ids` of source ids (`source_ids`) and target prefixes (`target_prefixes`), with a beam and
        nbest `check_search` accepts; a warning names the lines whose best translation reached its length limit, and
        one those whose translations' text leaves out byte pieces (`bytes_left_out`), each counted."""
        out: List[Hyps] = [[] for _ in ids]
        prefixes = prefixes or [None for _ in ids]
        todo = [i for i, (x, p) in enumerate(zip(ids, prefixes)) if x or p]   # a prefix alone is translated too
        todo.sort(key=lambda i: len(ids[i]))   # length-sorted batches: little padding
        self.share_out(todo, lambda ctx, model, chunk: self._decode_chunk(ctx, model, ids, prefixes, chunk, beam,
                                                                          nbest, out))
        limits = length_limits([len(x) + 1 for x in ids], self.decode.max_len_a, self.decode.max_len_b)
        cut = sorted(first_line + i for i in todo if out[i] and reached_limit(out[i][0][0], limits[i], prefixes[i]))
        quiet = getattr(self._unreported, "cut", None) is not None   # within `unreported`
        self.cut_off += 0 if quiet else len(cut)
        if cut and self.warn_cut_off and not quiet:
            logger.warning("input line%s %s: the translation reached its length limit (--max-len-a %s x source "
                           "tokens + --max-len-b %d) and may be cut off", "s" * (len(cut) > 1), line_list(cut, 10),
                           self.decode.max_len_a_text, self.decode.max_len_b)
        lost = {first_line + i: self.bytes_left_out([y for y, _ in out[i]]) for i in sorted(todo)}
        lost = {line: n for line, n in lost.items() if n}
        self.left_out += 0 if quiet else len(lost)
        if lost and not quiet:   # (a sample over the whole vocabulary draws such bytes; a search, rarely)
            logger.warning("input line%s %s: %d %s%s", "s" * (len(lost) > 1), line_list(list(lost), 10),
                           sum(lost.values()), self.LEFT_OUT, " (--sample over the whole vocabulary draws them: give "
                           "it a K, e.g. --sample 10)" if self.sample == 0 else "")
        return out

    def bytes_left_out(self, translations: Sequence[Sequence[int]]) -> int:
        """How many byte pieces the text of one line's `translations` (target ids as a search wrote them, as
        `translate_ids` or `ContinuousDecoder`'s `Done.ids` give them) leaves out: those that form no whole UTF-8
        character, e.g. a character's lead byte, then a syllable, or a control character
        (`Tokenizer.whole_characters`)."""
        translations = checked_translation_ids(translations, self.tgt_tok.vocab_size)
        return sum(len(ids) - len(self.tgt_tok.whole_characters(ids)) for ids in translations)

    def _beam(self, beam_size: Optional[int]) -> int:
        """`beam_size`, or the decode settings' beam for None, after checking the settings (`checked_decode`)."""
        decode = checked_decode(self.decode)
        if beam_size is not None and self.sample is not None:   # (the flags refuse --beam-size with --sample too)
            raise ValueError(f"beam_size {beam_size!r} asks for beam search, but the translator samples "
                             f"(sample={self.sample}): set sample to None first, or leave beam_size out")
        return decode.beam_size if beam_size is None else beam_size

    def check_search(self, beam: int, nbest: int) -> None:
        """ValueError for a beam or nbest the search cannot give (nbest > 1 needs beam search, not sampling, and
        beam x batch x vocabulary must fit MXNet's indices); TypeError for one that is not an int."""
        if self.sample is None:
            check_beam_args(beam, nbest)
            wide = search_too_wide(beam, self.decode.batch_size, self.tgt_tok.vocab_size, "beam_size",
                                   "decode.batch_size")
            if wide:
                raise ValueError(wide)
        elif nbest != 1:
            raise ValueError(f"nbest {nbest} needs beam search, but the translator samples (sample={self.sample})")

    def share_out(self, order: List[int], run: Callable[[mx.Context, Seq2SeqModel, List[int]], None]) -> None:
        """`run(ctx, model, chunk)` per batch of the decode batch size cut from the length-sorted indices `order`, dealt
        out among the devices longest first, so that they finish close together (several models run as an ensemble)."""
        bs = max(1, self.decode.batch_size)
        chunks = [order[start:start + bs] for start in range(0, len(order), bs)]
        devices = [(self.ctx, self.members)] + self.replicas
        if len(devices) > 1 and self._concurrent is None:
            self._concurrent = concurrent_devices_safe(self.ctxs)
        if not self._concurrent:   # one device, or CPU contexts that would have to take turns: the first does all
            devices = devices[:1]
        pending = iter(chunks[::-1])
        lock = threading.Lock()

        def work(ctx: mx.Context, members: list) -> None:
            model = as_model(members)
            while True:
                with lock:
                    chunk = next(pending, None)
                if chunk is None:
                    return
                run(ctx, model, chunk)
        with self.lock:
            if len(devices) > 1 and len(chunks) > 1:
                with ThreadPoolExecutor(len(devices), thread_name_prefix="nmt-decode") as pool:
                    for future in [pool.submit(work, c, m) for c, m in devices]:
                        future.result()   # re-raises a device's error
            elif chunks:
                work(*devices[0])

    def _decode_chunk(self, ctx: mx.Context, model, ids: List[List[int]], prefixes: List[Optional[TargetPrefix]],
                      chunk: List[int], beam: int, nbest: int, out: List[Hyps]) -> None:
        """Search one length-sorted batch (`chunk`: indices into `ids`) on `ctx`; hypotheses go to out[i]."""
        src_nd, len_nd, max_len = self.source_batch([ids[i] for i in chunk], ctx)
        chunk_prefixes = [prefixes[i] for i in chunk]
        if (beam == 1 and nbest == 1) or self.sample is not None:
            hyps = [[h] for h in greedy_search(model, src_nd, len_nd, max_len, self.sample,
                                               self.decode.length_penalty_alpha, chunk_prefixes,
                                               () if self.sample is None else self.tgt_tok.never_written())]
        else:
            hyps = beam_search(model, src_nd, len_nd, beam_size=beam, max_len=max_len,
                               alpha=self.decode.length_penalty_alpha, nbest=nbest, prefixes=chunk_prefixes)
        for r, i in enumerate(chunk):
            out[i] = hyps[r]

    def source_batch(self, src_ids: List[List[int]], ctx: mx.Context
                     ) -> Tuple[mx.nd.NDArray, mx.nd.NDArray, np.ndarray]:
        """Sources padded to the longest (+ EOS) on `ctx`, their lengths, and the longest translation allowed for
        each (max_len_a * source length + max_len_b)."""
        src, src_len = pad_sources(src_ids, max(len(x) for x in src_ids) + 1)
        max_len = length_limits(src_len, self.decode.max_len_a, self.decode.max_len_b)
        return mx.nd.array(src, ctx=ctx, dtype="float32"), mx.nd.array(src_len, ctx=ctx, dtype="float32"), max_len

    def texts(self, hyps: Sequence[Hyps]) -> List[List[Tuple[str, float]]]:
        """Per sentence, its (target ids, score) hypotheses detokenized to single lines, in one tokenizer call."""
        flat = self.tgt_tok.decode([ids for h in hyps for ids, _ in h])
        out, k = [], 0
        for h in hyps:
            out.append([(tidy_translation(flat[k + j]), score) for j, (_, score) in enumerate(h)])
            k += len(h)
        return out

    def continuous(self, beam_size: Optional[int] = None, nbest: int = 1, max_batch: int = 0):
        """A `nmt.continuous.ContinuousDecoder` on the first device: sentences added at any time join the running
        search (what a service uses); `max_batch` defaults to the decode batch size."""
        from nmt.continuous import ContinuousDecoder   # not at import time: only the service needs it
        if self.sample is not None:
            raise ValueError(f"continuous runs beam search, but the translator samples (sample={self.sample}): set "
                             "sample to None first, or translate with `translate`")
        beam = self._beam(beam_size)
        return ContinuousDecoder(self, beam, nbest, max_batch or self.decode.batch_size)

    def translate_nbest(self, lines: Union[str, Iterable[str]], nbest: int, beam_size: Optional[int] = None,
                        first_line: int = 1, prefixes: Union[None, str, Sequence[Optional[str]]] = None):
        """Per input line, up to `nbest` (detokenized translation, score), best first ([] for an empty line); for
        one string, its list. `prefixes`: per line, text its translations start with (for one string, a string)."""
        if isinstance(lines, str):
            return self.translate_nbest([lines], nbest, beam_size, first_line, one_prefix(prefixes))[0]
        return self.texts(self.translate_ids(lines, beam_size=beam_size, nbest=nbest, first_line=first_line,
                                             prefixes=prefixes))

    def translate_aligned(self, lines: Union[str, Iterable[str]], nbest: int = 1, beam_size: Optional[int] = None,
                          first_line: int = 1, prefixes: Union[None, str, Sequence[Optional[str]]] = None):
        """`translate_nbest` with each translation's word alignment: per input line, up to `nbest` (translation,
        score, links), links being (source word, translation word) pairs counted from 0 (`nmt.align`); for one
        string, its list."""
        from nmt.align import with_links
        if isinstance(lines, str):
            return self.translate_aligned([lines], nbest, beam_size, first_line, one_prefix(prefixes))[0]
        return with_links(self, *self._searched(lines, beam_size, nbest, first_line, prefixes))

    def translate(self, lines: Union[str, Iterable[str]], beam_size: Optional[int] = None, first_line: int = 1,
                  prefixes: Union[None, str, Sequence[Optional[str]]] = None):
        """One detokenized, single-line translation per input line; for one string, its translation.
        `prefixes`: per line, text its translation starts with (None or "": none; for one string, a string)."""
        if isinstance(lines, str):
            return self.translate([lines], beam_size, first_line, one_prefix(prefixes))[0]
        return [r[0][0] if r else "" for r in self.translate_nbest(lines, 1, beam_size, first_line, prefixes)]
