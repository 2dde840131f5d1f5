"""Which decoding settings keep a model's scores out of scores.json (`nmt.scoring.other_decoding`): every setting
that changes a translation, a setting added to DecodeConfig later included, and none that only batches or lists."""
from __future__ import annotations

import dataclasses
import types

from nmt.config import DecodeConfig
from nmt.scoring import other_decoding


def translator(saved, decode):
    return types.SimpleNamespace(config=types.SimpleNamespace(decode=saved), decode=decode)


def test_each_setting_that_changes_scores_is_named_by_its_flag():
    saved = DecodeConfig()
    changed = {"beam_size": ("--beam-size", 6), "length_penalty_alpha": ("--length-penalty", 1.0),
               "max_len_a": ("--max-len-a", 2.0), "max_len_b": ("--max-len-b", 3),
               "max_input_tokens": ("--max-input-tokens", 100)}
    assert set(changed) | set(DecodeConfig.UNSCORED) == {f.name for f in dataclasses.fields(DecodeConfig)}
    for name, (flag, value) in changed.items():
        why = other_decoding(translator(saved, dataclasses.replace(saved, **{name: value})))
        assert f"{flag} {value} (saved: {getattr(saved, name)})" in why, why
    assert other_decoding(translator(saved, dataclasses.replace(saved, batch_size=7, nbest=3, beam_size=5))) == ""
    assert other_decoding(translator(None, DecodeConfig(beam_size=2))) == ""


def test_a_setting_added_later_counts_without_being_listed():
    """A field added to DecodeConfig (here a minimum length) changes scores unless DecodeConfig.UNSCORED says otherwise:
    forgetting a list cannot let scores at other settings pass for the model's own."""
    @dataclasses.dataclass
    class WithMinLen(DecodeConfig):
        min_len: int = 0
    why = other_decoding(translator(WithMinLen(), WithMinLen(min_len=5)))
    assert "min_len 5 (saved: 0)" in why, why


def test_a_setting_added_later_is_recorded_compared_and_kept_within_a_run():
    """A field added to DecodeConfig was left out of the hand lists of what a scores.json entry records and of what
    a resumed run may not change: a resume to another value kept the test scores made before it (nmt-serve's /info
    and nmt-export showed them) and validated at it against a best made without it (dev BLEU 0.00 against 30.71)."""
    from nmt.config import Config
    from nmt.config_resume import _fixed_on_resume
    from nmt.scoring import entry_decode
    from nmt.shown_score import decoded_as

    @dataclasses.dataclass
    class WithMinLen(DecodeConfig):
        min_len: int = 0
    assert entry_decode(WithMinLen())["min_len"] == ("min_len", 0)
    assert entry_decode(WithMinLen())["length_penalty"] == ("length_penalty_alpha", 0.6)
    before = {name: getattr(DecodeConfig(), f) for name, (f, _) in entry_decode(DecodeConfig()).items()}
    assert decoded_as(before, WithMinLen()) and not decoded_as(before, WithMinLen(min_len=5))
    assert decoded_as({**before, "min_len": 5}, WithMinLen(min_len=5))
    assert "dev translations" in _fixed_on_resume("decode.min_len", Config())
    assert "dev translations" in _fixed_on_resume("decode.max_len_b", Config())
    for unchanged in ("batch_size", "nbest", "beam_size", "length_penalty_alpha"):   # (greedy dev translations)
        assert _fixed_on_resume(f"decode.{unchanged}", Config()) == "", unchanged
    beam = Config()
    beam.train.valid_beam = 4
    assert "dev translations" in _fixed_on_resume("decode.length_penalty_alpha", beam)
