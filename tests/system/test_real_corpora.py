"""The dataset recipes on the real corpora of the offline mirror (../shared/data or $NMT_DATA_DIR)."""
from __future__ import annotations

import re

import pytest

from nmt.config import ConfigError, DataConfig
from nmt.corpus import read_tsv
from nmt.recipes import RECIPES, SOURCES, load_data
from tests.unit.test_recipes import assert_no_shared_side, sha


def test_registry_checksums_match_the_mirror(shared_data):
    for src in SOURCES.values():
        for spec in src.files.values():
            data = (shared_data / spec.path).read_bytes()
            assert (len(data), sha(data)) == (spec.bytes, spec.sha256), spec.path


def _load(recipe, src, tgt, shared_data, tmp_path):
    # (how fast this is, is measured by scripts/benchmark_data.py, not asserted: shared machines are noisy)
    return load_data(DataConfig(recipe=recipe, src_lang=src, tgt_lang=tgt, data_dir=str(shared_data),
                                cache_dir=str(tmp_path / "cache")))


def test_real_tatoeba_recipe(shared_data, tmp_path):
    ko_en = _load("tatoeba", "ko", "en", shared_data, tmp_path)
    assert len(ko_en.dev) == 500 and len(ko_en.tests["tatoeba-test"]) == 2400 and list(ko_en.tests) == ["tatoeba-test"]
    assert 3800 < len(ko_en.train) < 4600
    assert_no_shared_side(ko_en)
    raw = read_tsv(shared_data / "tatoeba-kor-eng-manythings/kor.txt", 1, 0)
    raw_pairs = set(zip(raw.src, raw.tgt))
    assert set(zip(ko_en.train.src, ko_en.train.tgt)) <= raw_pairs and set(zip(ko_en.dev.src, ko_en.dev.tgt)) <= raw_pairs
    assert len(ko_en.train) + len(ko_en.dev) + sum(ko_en.drops.values()) == len(raw) == 5749
    assert ko_en.drops["overlap:tatoeba-test"] >= 1015   # the pairs SOURCE.txt says occur verbatim in the test set
    en_ko = _load("tatoeba", "en", "ko", shared_data, tmp_path)
    assert en_ko.train.src == ko_en.train.tgt and en_ko.dev.tgt == ko_en.dev.src
    assert en_ko.tests["tatoeba-test"].src[0] == "2, 4, 6 etc. are even numbers."


def test_real_all_recipe(shared_data, tmp_path):
    splits = _load("all", "ko", "en", shared_data, tmp_path)
    assert {k: len(v) for k, v in splits.tests.items()} == {"tatoeba-test": 2400, "flores200-devtest": 1012}
    assert len(splits.dev) == 500 and len(splits.train) > 30000
    assert_no_shared_side(splits)
    total = 5749 + 36660 + 720 + 1000   # the line counts of the four training corpora (see their SOURCE.txt)
    assert len(splits.train) + len(splits.dev) + sum(splits.drops.values()) == total
    assert splits.drops["identical"] >= 5000 and splits.drops["too_long"] > 0
    assert not any(re.search(r":(func|class|meth|mod|exc|attr|ref):`", s) for s in splits.train.src + splits.train.tgt)
    tatoeba = set(read_tsv(shared_data / "tatoeba-kor-eng-manythings/kor.txt", 1, 0).src)
    assert {s in tatoeba for s in splits.dev.src} == {True, False}   # the dev draw mixes corpora


@pytest.mark.parametrize("src,tgt", [("ko", "en"), ("en", "ko")])
def test_load_tests_gives_the_test_sets_of_load_data(shared_data, src, tgt):
    from nmt.recipes import load_tests
    cfg = DataConfig(recipe="tatoeba", data_dir=str(shared_data), src_lang=src, tgt_lang=tgt)
    full, alone = load_data(cfg).tests, load_tests(cfg)
    assert list(alone) == list(full) == ["tatoeba-test"]
    assert all(alone[k].src == full[k].src and alone[k].tgt == full[k].tgt for k in full)
    korean = alone["tatoeba-test"].src if src == "ko" else alone["tatoeba-test"].tgt
    assert sum(bool(re.search("[\uac00-\ud7a3]", line)) for line in korean) > 0.9 * len(korean)


def test_upsample_repeats_one_corpus_of_the_mixture(shared_data):
    cfg = DataConfig(recipe="tatoeba", data_dir=str(shared_data))
    plain = load_data(cfg)
    cfg.upsample = "tatoeba-manythings=3"
    up = load_data(cfg)
    assert len(up.train) == 3 * len(plain.train)
    assert up.train.src[:len(plain.train)] == plain.train.src and up.train.src[-5:] == plain.train.src[-5:]
    assert up.dev.src == plain.dev.src and list(up.tests) == list(plain.tests)   # dev and tests unchanged


@pytest.mark.parametrize("spec,match", [("python-docs=2", "not a training corpus of recipe tatoeba"),
                                        ("tatoeba-manythings=0", "integer K >= 1"),
                                        ("tatoeba-manythings", "integer K >= 1"),
                                        ("tatoeba-manythings=x", "integer K >= 1")])
def test_bad_upsample_is_a_clear_error(shared_data, spec, match):
    with pytest.raises(ConfigError, match=rf"--upsample '{re.escape(spec)}': .*{match}"):
        load_data(DataConfig(recipe="tatoeba", data_dir=str(shared_data), upsample=spec))


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_shipped_recipes_do_not_warn_of_duplicates(recipe, shared_data, nmt_logs):
    """Measured: python-docs-ko drops 3.0% of its pairs as duplicates, the other corpora none (DUPLICATE_WARN_SHARE)."""
    load_data(DataConfig(recipe=recipe, data_dir=str(shared_data)))
    kept = [r.getMessage() for r in nmt_logs if ": kept " in r.getMessage()]
    assert kept and not [m for m in kept if "exact duplicates" in m], kept
