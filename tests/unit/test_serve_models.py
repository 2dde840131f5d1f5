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
                                           ("ko", "fr", "no model translates ko->fr: this server has ko-en, en-ko"),
                                           # was "no model translates *->ko: this server has ko-en, en-ko"
                                           ("", "ko", "src_lang is empty: give a language of this server's models "
                                                      "(ko-en, en-ko), or leave it out"),
                                           ("ko", " ", "tgt_lang is empty")])
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
    from nmt.shown_score import model_test_score
    good = {"test": {"best": {"bleu": 12.5, "bleu_signature": "s"}, "700": {"bleu": "n/a"}}}
    (tmp_path / "scores.json").write_text(json.dumps(good))
    assert model_test_score(tmp_path, "best")["bleu"] == 12.5
    for damaged in ('{"test": {"best"', "[1, 2]", '{"test": 3}'):
        (tmp_path / "scores.json").write_text(damaged)
        assert model_test_score(tmp_path, "best") is None
        assert f"/info shows no test score for {tmp_path}" in nmt_logs[-1].getMessage()


def entry(bleu: float, beam: int = 5, alpha: float = 0.6) -> dict:
    return {"bleu": bleu, "bleu_signature": "nrefs:1|tok:13a", "chrf": 30.0, "chrf_signature": "nc:6",
            "beam_size": beam, "length_penalty": alpha}


def test_info_shows_the_score_on_the_models_own_test_set(tmp_path):
    """/info's test score was the highest BLEU over every test set recorded for the checkpoint: after nmt-evaluate
    --name my-set on 200 training pairs it advertised 47 BLEU instead of the recipe test's 7.89. It is now the
    model's own test set's (its recipe's, in the recipe's order), never chosen by its score, with the beam size
    and length penalty it was decoded with; /info also gives the length penalty and maximum lengths the model
    decodes with."""
    from nmt.shown_score import model_test_score
    from nmt.serve.api import Model
    scores = {"my-set": {"best": entry(47.0)}, "dev": {"best": entry(60.0)}, "tatoeba-test": {"best": entry(7.89)},
              "zz": {"best": entry(99.0)}}
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    stub = Stub("ko", "en")   # Config(): the tatoeba recipe, whose one test set is tatoeba-test
    stub.model_dir, stub.checkpoint, stub.member_dirs = tmp_path, "best", []
    stub.decode = DecodeConfig(beam_size=4, length_penalty_alpha=1.0, max_len_a=2.0, max_len_b=7)
    info = Model(stub, batcher=None).info()   # made at beam 5, where the model decodes at 4: said so
    assert info["best_test_score"] == {"test_set": "tatoeba-test", "checkpoint": "best", "of_loaded_checkpoint": True,
                                       "at_loaded_settings": False, "extra": {}, "extra_signatures": {}, **entry(7.89)}
    stub.decode = DecodeConfig()   # (an export's config.json edited to beam 4 showed its beam-5 score as the model's)
    assert Model(stub, batcher=None).info()["best_test_score"]["at_loaded_settings"] is True
    stub.decode = DecodeConfig(beam_size=4, length_penalty_alpha=1.0, max_len_a=2.0, max_len_b=7)
    korean = {"extra": {"bleu_ko_mecab": 9.63}, "extra_signatures": {"bleu_ko_mecab": "tok:ko-mecab"}}
    (tmp_path / "scores.json").write_text(json.dumps({"tatoeba-test": {"best": {**entry(0.5), **korean}}}))
    assert {k: model_test_score(tmp_path, "best")[k] for k in korean} == korean   # (Korean output's: it had none)
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    assert (info["beam_size"], info["length_penalty"], info["max_len_a"], info["max_len_b"]) == (4, 1.0, 2.0, 7)
    # the recipe's sets in its order, whatever their scores
    scores["flores200-devtest"] = {"best": entry(20.0)}
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    assert model_test_score(tmp_path, "best", tests=["tatoeba-test", "flores200-devtest"])["bleu"] == 7.89
    assert model_test_score(tmp_path, "best", tests=["flores200-devtest", "tatoeba-test"])["bleu"] == 20.0
    # a model trained on its own test files: "test"; none of its own sets recorded: another, the first by name
    scores["test"] = {"best": entry(3.5, beam=1)}
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    assert model_test_score(tmp_path, "best", tests=["test"])["bleu"] == 3.5
    assert model_test_score(tmp_path, "best", tests=["test"])["beam_size"] == 1
    assert model_test_score(tmp_path, "best", tests=["other"])["test_set"] == "flores200-devtest"
    # the loaded checkpoint's scores first; when it has none, best's, then avg's, then the latest step's
    scores = {"tatoeba-test": {"700": entry(1.0), "900": entry(2.0), "best": entry(3.0)}, "zz": {"1100": entry(9.0)}}
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    assert model_test_score(tmp_path, "700", tests=["tatoeba-test"])["bleu"] == 1.0
    assert model_test_score(tmp_path, "700", tests=["tatoeba-test"])["of_loaded_checkpoint"] is True
    # (a set of --name, "zz", even of the loaded checkpoint, never before the model's own: it showed 8 sentences')
    assert model_test_score(tmp_path, "1100", tests=["tatoeba-test"])["bleu"] == 3.0
    assert model_test_score(tmp_path, "1100", tests=["other"])["bleu"] == 9.0   # (none of its own: the loaded's)
    assert model_test_score(tmp_path, "avg", tests=["tatoeba-test"])["of_loaded_checkpoint"] is False   # best's
    assert model_test_score(tmp_path, "avg", tests=["tatoeba-test"])["bleu"] == 3.0
    del scores["tatoeba-test"]["best"]
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    assert model_test_score(tmp_path, "avg", tests=["tatoeba-test"])["checkpoint"] == "900"


def test_the_loaded_checkpoint_is_found_by_its_step(tmp_path):
    """scores.json keys a step's scores by its number: --checkpoint latest (or 00000700) is found there."""
    from nmt.scoring import checkpoint_key
    assert [checkpoint_key(c) for c in ("best", "avg", "00000700", "700", None)] == ["best", "avg", "700", "700", None]
    assert checkpoint_key("latest", tmp_path / "params.00000900") == "900"
    # an export's one checkpoint, params.best, taken as the avg it was exported from: its scores are best's (they
    # were recorded twice, and /info said the score was not the loaded checkpoint's)
    assert [checkpoint_key(c, tmp_path / "params.best") for c in ("avg", "latest", "best")] == ["best"] * 3
    assert checkpoint_key("avg", tmp_path / "params.avg") == "avg"


@pytest.mark.parametrize("pairs, text, langs", [([("ko", "en"), ("en", "ko")], "안녕하세요", {"src_lang": "ko",
                                                                                          "tgt_lang": "en"}),
                                                ([("en", "ko")], "Hello.", {})])
def test_the_documents_examples_are_requests_this_server_takes(pairs, text, langs):
    """On a server of two models "Try it out" sent the example without languages, refused with "this server has
    several models (ko-en, en-ko): give src_lang and tgt_lang"; an en -> ko server's was Korean."""
    from nmt.serve.api import create_app
    service = Service([Stub(*p) for p in pairs], Limits(max_beam_size=3))   # the example's beam 4 was refused
    try:
        doc = create_app(service).openapi()
    finally:
        service.close()
    body = {p: doc["paths"][p]["post"]["requestBody"]["content"]["application/json"]["schema"]["example"]
            for p in ("/translate", "/attention")}
    assert body["/translate"] == {"text": [text], "beam_size": 3, "nbest": 1, **langs}
    assert body["/attention"] == {"text": text, **langs}
    service.pick(langs.get("src_lang"), langs.get("tgt_lang"))   # routed, not refused


def test_the_latest_checkpoint_at_the_best_step_has_best_s_score(tmp_path):
    """Serving --checkpoint latest when the latest step was the best one showed the score recorded for params.best
    (the same parameters) as another checkpoint's (of_loaded_checkpoint false; the page said "checkpoint best")."""
    from nmt import manifest
    from nmt.shown_score import model_test_score
    (tmp_path / "scores.json").write_text(json.dumps({"test": {"best": {**entry(9.5), "step": 400}}}))
    (tmp_path / "params.best").write_bytes(b"p")
    manifest.write_manifest(tmp_path, "best", ["params.best"], 400)
    for loaded, of_loaded in (("400", True), ("best", True), ("300", False)):
        score = model_test_score(tmp_path, loaded, tests=["test"])
        assert (score["bleu"], score["checkpoint"], score["of_loaded_checkpoint"]) == (9.5, "best", of_loaded)


def test_an_ensembles_info_names_each_architecture(tmp_path):
    """/info of a Transformer + LSTM ensemble said "arch": "transformer", the first member's alone."""
    from types import SimpleNamespace
    from nmt.serve.api import Model
    stub = Stub("ko", "en")
    stub.model_dir, stub.checkpoint, stub.member_dirs = tmp_path, "best", [tmp_path / "b", tmp_path / "c"]
    stub.members = [SimpleNamespace(cfg=Config.for_arch(a).model) for a in ("transformer", "lstm", "transformer")]
    assert Model(stub, batcher=None).info()["arch"] == "transformer+lstm"
    stub.members = stub.members[:1]
    assert Model(stub, batcher=None).info()["arch"] == "transformer"
