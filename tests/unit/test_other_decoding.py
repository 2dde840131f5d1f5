"""Which decoding settings keep a model's scores out of scores.json (`nmt.scoring.other_decoding`): every setting
that changes a translation, a setting added to DecodeConfig later included, and none that only batches or lists."""
from __future__ import annotations

import dataclasses
import types

from nmt.config import DecodeConfig
from nmt.scoring import UNSCORED_DECODE, other_decoding


def translator(saved, decode):
    return types.SimpleNamespace(config=types.SimpleNamespace(decode=saved), decode=decode)


def test_each_setting_that_changes_scores_is_named_by_its_flag():
    saved = DecodeConfig()
    changed = {"beam_size": ("--beam-size", 6), "length_penalty_alpha": ("--length-penalty", 1.0),
               "max_len_a": ("--max-len-a", 2.0), "max_len_b": ("--max-len-b", 3),
               "max_input_tokens": ("--max-input-tokens", 100)}
    assert set(changed) | set(UNSCORED_DECODE) == {f.name for f in dataclasses.fields(DecodeConfig)}
    for name, (flag, value) in changed.items():
        why = other_decoding(translator(saved, dataclasses.replace(saved, **{name: value})))
        assert f"{flag} {value} (saved: {getattr(saved, name)})" in why, why
    assert other_decoding(translator(saved, dataclasses.replace(saved, batch_size=7, nbest=3, beam_size=5))) == ""
    assert other_decoding(translator(None, DecodeConfig(beam_size=2))) == ""


def test_a_setting_added_later_counts_without_being_listed():
    """A field added to DecodeConfig (here a minimum length) changes scores unless UNSCORED_DECODE says otherwise:
    forgetting a list cannot let scores at other settings pass for the model's own."""
    @dataclasses.dataclass
    class WithMinLen(DecodeConfig):
        min_len: int = 0
    why = other_decoding(translator(WithMinLen(), WithMinLen(min_len=5)))
    assert "min_len 5 (saved: 0)" in why, why
