"""The bodies nmt-serve answers with, as pydantic models: they describe each endpoint's 200 answer in the OpenAPI
document, so that a client generated from it knows their fields. The endpoints build the bodies as plain dicts; the
tests check real answers against these models (unknown fields refused), so the two cannot drift apart."""
from __future__ import annotations

import logging
from typing import Dict, List, Optional

from pydantic import BaseModel, ConfigDict, Field

from nmt.serve.schema import error_responses

logger = logging.getLogger("nmt.serve")

ALIGNMENT = "[source word, translation word] pairs, words counted from 0 (with \"alignment\": true)"
PIECES = "its SentencePiece pieces as the search wrote them, without </s> (with \"pieces\": true)"


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Hypothesis(_Answer):
    translation: str
    score: float = Field(description="log-probability divided by the GNMT length penalty, as nmt-translate --nbest")
    alignment: Optional[List[List[int]]] = Field(None, description=ALIGNMENT)
    pieces: Optional[List[str]] = Field(None, description=PIECES)


class Translation(_Answer):
    translation: str = Field(description="the best translation; \"\" for an empty line")
    score: Optional[float] = Field(description="its score; null for an empty line")
    alignment: Optional[List[List[int]]] = Field(None, description=ALIGNMENT)
    pieces: Optional[List[str]] = Field(None, description=PIECES)
    nbest: List[Hypothesis] = Field(description="the n-best list, best first; [] for an empty line")


class TranslateAnswer(_Answer):
    src_lang: str
    tgt_lang: str
    beam_size: int = Field(description="the beam the request was decoded with")
    warnings: List[str] = Field(description="lines cut, translations at the length limit, text in another language")
    translations: List[Translation] = Field(description="one per sentence of text, in its order")


class AttentionAnswer(_Answer):
    translation: str
    src_pieces: List[str] = Field(description="the source's SentencePiece pieces (▁ starts a word)")
    tgt_pieces: List[str] = Field(description="the translation's pieces, </s> last when the model ended it")
    weights: List[List[float]] = Field(description="attention, target piece x source piece; each row sums to 1")
    alignment: List[List[int]] = Field(description="the word alignment of these weights: [source word, translation "
                                                   "word] pairs, words counted from 0, as /translate gives them")
    warnings: List[str] = Field(description="text or translation cut, a greedy translation at the length limit, "
                                            "byte pieces, <s> and <pad> left out of the translation's text")


class ModelLoad(_Answer):
    queued: int = Field(description="sentences waiting")
    batches: int
    steps: int
    sentence_steps: int = Field(description="sentence_steps / steps: the mean number of sentences a step advanced")
    sentences: int
    busy_seconds: float


class HealthAnswer(_Answer):
    status: str = Field(description="\"ok\"")
    models: Dict[str, ModelLoad] = Field(description="by language pair, e.g. \"ko-en\"")


class TestScore(_Answer):
    test_set: str
    checkpoint: str = Field(description="the checkpoint scored: best, avg, a step, or an ensemble's key")
    of_loaded_checkpoint: bool = Field(description="whether that is the checkpoint the server loaded")
    at_loaded_settings: bool = Field(description="whether it was decoded at the model's decoding settings (its "
                                     "beam_size, length_penalty, ...: config.json's, maybe edited since)")
    bleu: float
    bleu_signature: Optional[str]
    chrf: Optional[float]
    chrf_signature: Optional[str]
    extra: Dict[str, float] = Field(description="further scores, e.g. bleu_ko_mecab (BLEU on ko-mecab morphemes, "
                                    "Korean output's)")
    extra_signatures: Dict[str, str] = Field(description="their sacreBLEU signatures, by the same keys")
    beam_size: Optional[int]
    length_penalty: Optional[float]


class ModelInfo(_Answer):
    src_lang: str
    tgt_lang: str
    arch: str = Field(description="its architecture; an ensemble's, each once in member order: transformer+lstm")
    model_dir: str
    checkpoint: Optional[str] = Field(description="best, latest, avg or a step: the checkpoint asked for")
    step: Optional[int] = Field(description="the training step of the parameters loaded (best: when loaded; a "
                                "training run may have written another best since)")
    ensemble: List[str] = Field(description="the further model directories of an ensemble")
    member_steps: List[Optional[int]] = Field(description="the training steps of their parameters, in that order")
    beam_size: int
    length_penalty: float
    max_len_a: float
    max_len_b: int
    max_input_tokens: int
    best_test_score: Optional[TestScore] = Field(description="the test score recorded in the model's scores.json")


class LimitsInfo(_Answer):
    max_body_bytes: int
    max_sentences: int
    max_beam_size: int
    timeout_s: float


class InfoAnswer(_Answer):
    models: List[ModelInfo]
    limits: LimitsInfo


def responses(answer: type, description: str, *errors: int) -> dict:
    """FastAPI's `responses` of an endpoint: its 200 `answer` model and `description`, and its error statuses
    (`error_responses`)."""
    return {200: {"model": answer, "description": description}, **error_responses(*errors)}


def translation_item(hyps: list, alignment: bool, pieces: Optional[List[List[str]]] = None) -> dict:
    """The answer for one sentence: its best translation and score and its n-best list; with `alignment`
    ((text, score, links) hypotheses) each one's links too, and with `pieces` (per hypothesis) each one's pieces."""
    items = []
    for k, h in enumerate(hyps):
        items.append({"translation": h[0], "score": h[1]})
        if alignment:
            items[-1]["alignment"] = [list(link) for link in h[2]]
        if pieces is not None:
            items[-1]["pieces"] = pieces[k]
    empty = {"translation": "", "score": None, **({"alignment": []} if alignment else {}),
             **({"pieces": []} if pieces is not None else {})}
    return {**(items[0] if items else empty), "nbest": items}


def logged(request, warnings: List[str]) -> List[str]:
    """An answer's warnings, also in the server's log as the answer words them (text[i], max_input_tokens)."""
    if warnings:   # (the Translator's own, "input line N" and --max-input-tokens, are not said: `Batcher._add`)
        logger.info("%s %s answered with %d warning(s): %s", request.method, request.url.path, len(warnings),
                    "; ".join(warnings))
    return warnings
