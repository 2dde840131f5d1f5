"""Several models in one service: a request is routed by its language pair, and a pair the server lacks or an
ambiguous request gets a 422 that lists the pairs it has."""
from __future__ import annotations

import json

import pytest

from nmt.config import Config, DecodeConfig
from nmt.serve.api import Service
from nmt.serve.schema import Limits, RequestError


class Stub:
    """Just what the service reads of a Translator."""

    def __init__(self, src: str, tgt: str):
        self.src_lang, self.tgt_lang, self.decode, self.config = src, tgt, DecodeConfig(), Config()

    def translate_nbest(self, lines, nbest, beam_size=None):
        return [[(self.tgt_lang + ":" + x, 0.0)] for x in lines]


@pytest.fixture
def service():
    s = Service([Stub("ko", "en"), Stub("en", "ko")], Limits())
    yield s
    s.close()


def test_requests_are_routed_by_language_pair(service):
    assert service.pick("ko", "en").pair == "ko-en"
    assert service.pick("en", None).pair == "en-ko"
    assert service.pick(None, "en").pair == "ko-en"


@pytest.mark.parametrize("src,tgt,words", [(None, None, "give src_lang and tgt_lang"),
                                           ("ko", "fr", "no model translates ko->fr: this server has ko-en, en-ko")])
def test_unknown_or_ambiguous_pair_is_refused_with_the_pairs(service, src, tgt, words):
    with pytest.raises(RequestError) as e:
        service.pick(src, tgt)
    assert e.value.status == 422 and words in e.value.message


def test_two_models_for_one_pair_are_refused():
    with pytest.raises(ValueError, match="two models translate ko-en"):
        Service([Stub("ko", "en"), Stub("ko", "en")], Limits())


def test_a_damaged_scores_file_leaves_info_without_a_score(tmp_path, nmt_logs):
    """A scores.json that is not valid JSON (or not scores) made GET /info answer 500, and the web page, which
    starts from /info, showed nothing; the model still translates, so /info goes on without its test score."""
    from nmt.serve.api import best_test_score
    good = {"test": {"best": {"bleu": 12.5, "bleu_signature": "s"}, "700": {"bleu": "n/a"}}}
    (tmp_path / "scores.json").write_text(json.dumps(good))
    assert best_test_score(tmp_path, "best")["bleu"] == 12.5
    for damaged in ('{"test": {"best"', "[1, 2]", '{"test": 3}'):
        (tmp_path / "scores.json").write_text(damaged)
        assert best_test_score(tmp_path, "best") is None
        assert f"/info shows no test score for {tmp_path}" in nmt_logs[-1].getMessage()
