"""SentencePiece tokenizer: training conventions, round trips, small data, errors, reuse."""
from __future__ import annotations

import errno
import logging
import os
import random
import re
import tempfile
import unicodedata
from pathlib import Path

import pytest
import sentencepiece as spm

from nmt.tokenizer import (BOS_ID, EOS_ID, JOINT, PAD_ID, UNK_ID, Tokenizer, TokenizerError, character_coverage,
                           load_or_train_tokenizer, load_tokenizers, tokenizer_names, tokenizer_path, train_tokenizer)

KO_WORDS = ["나는", "학교에", "갑니다", "오늘", "날씨가", "좋네요", "우리", "친구와", "함께", "밥을", "먹었어요",
            "책을", "읽고", "있습니다", "서울은", "한국의", "수도입니다", "내일", "비가", "올", "거예요",
            "커피", "한", "잔", "주세요", "대학교", "도서관에서", "공부했다", "大韓民國", "漢字", "를", "배워요"]
EN_WORDS = ["I", "go", "to", "school", "today", "the", "weather", "is", "nice", "we", "ate", "rice", "with",
            "friends", "reading", "a", "book", "Seoul", "capital", "of", "Korea", "rain", "coffee", "please"]


def synthetic_lines(words, n=1500, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) + rng.choice([".", "?", "!", ""])
            for _ in range(n)]


@pytest.fixture(scope="module")
def ko_tok(tmp_path_factory) -> Tokenizer:
    return train_tokenizer(synthetic_lines(KO_WORDS), tmp_path_factory.mktemp("ko"), "ko", 360)


ROUND_TRIP = [
    "오늘 날씨가 좋네요.",
    "大韓民國의 首都는 서울입니다.",                        # Hanja mixed with Hangul
    "커피 한 잔 ☕ 주세요 😀👍🏽",                            # emoji, incl. a skin-tone modifier sequence
    "Python 3.11로 NMT를 train했어요 (BLEU=23.4%)",          # mixed scripts, digits, punctuation
    "Привет, สวัสดี, مرحبا, こんにちは — 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",         # scripts never seen in training
    "  두 칸   공백과\u3000탭 ",                               # whitespace kept exactly (a tab: never written)
    "ＦＵＬＬＷＩＤＴＨ ① 﨑",                               # NFKC would rewrite these; we must not
    "",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip_korean_hanja_emoji_mixed(ko_tok, text):
    ids = ko_tok.encode([text])[0]
    assert ko_tok.decode([ids]) == [text]
    assert UNK_ID not in ids, "byte fallback should cover every character"


def test_round_trip_normalizes_to_nfc(ko_tok):
    decomposed = unicodedata.normalize("NFD", "한국어 漢字")  # Hangul as conjoining jamo (e.g. macOS file names)
    assert decomposed != "한국어 漢字"
    assert ko_tok.decode(ko_tok.encode([decomposed])) == ["한국어 漢字"]
    assert ko_tok.encode([decomposed]) == ko_tok.encode(["한국어 漢字"])


def test_the_one_character_a_round_trip_changes_is_sentencepieces_word_mark(ko_tok):
    """The module's docstring promised the round trip for any string: U+2581, SentencePiece's mark of a word's
    start, comes back as a space (it says so now)."""
    assert ko_tok.decode(ko_tok.encode(["a\u2581b 한국어"])) == ["a b 한국어"]


def test_unseen_characters_become_byte_pieces(ko_tok):
    pieces = ko_tok.pieces("😀")
    assert "<0xF0>" in pieces and "<0x9F>" in pieces
    assert ko_tok.pieces("학교에") != ko_tok.pieces("😀")


def test_special_ids_files_and_attributes(ko_tok, tmp_path):
    sp = spm.SentencePieceProcessor(model_file=str(ko_tok.path))
    assert [sp.id_to_piece(i) for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert ko_tok.path.name == "spm.ko.model" and ko_tok.lang == "ko"
    assert ko_tok.path.with_suffix(".vocab").is_file()
    assert sorted(p.name for p in ko_tok.path.parent.iterdir()) == ["spm.ko.model", "spm.ko.vocab"]  # no temp files
    assert ko_tok.vocab_size == 360 == sp.get_piece_size()
    assert tokenizer_path(tmp_path, "en") == tmp_path / "spm.en.model"


def test_encode_is_batched_and_adds_no_specials(ko_tok):
    lines = synthetic_lines(KO_WORDS, n=50, seed=7)
    batch = ko_tok.encode(lines)
    assert batch == [ko_tok.encode([line])[0] for line in lines]
    assert all(BOS_ID not in ids and EOS_ID not in ids and PAD_ID not in ids for ids in batch)
    assert ko_tok.encode([]) == []


def test_decode_strips_specials_and_stops_at_eos(ko_tok):
    import numpy as np
    ids = ko_tok.encode(["우리 친구와 함께"])[0]
    row = np.array([BOS_ID] + ids + [EOS_ID] + ids[:2] + [PAD_ID, PAD_ID], dtype=np.int32)
    assert ko_tok.decode([row, [PAD_ID] * 3, [EOS_ID] + ids]) == ["우리 친구와 함께", "", ""]


def test_decode_out_of_range_id(ko_tok):
    with pytest.raises(TokenizerError, match=r"id 360 in sequence 1 .*size 360"):
        ko_tok.decode([[5], [5, 360]])
    with pytest.raises(TokenizerError, match="item 1 is int"):
        ko_tok.encode(["ok", 3])


def test_character_coverage_per_language(tmp_path):
    # One rare Hanja among ~100k characters: Korean (coverage 0.9995) leaves it to byte fallback, English
    # (coverage 1.0) keeps every character as a piece.
    lines = synthetic_lines(KO_WORDS, n=4000, seed=3) + ["희귀한 글자 鑛"]
    ko = train_tokenizer(lines, tmp_path / "ko", "ko", 600)
    en = train_tokenizer(lines, tmp_path / "en", "en", 600)
    assert any(p.startswith("<0x") for p in ko.pieces("鑛"))
    assert not any(p.startswith("<0x") for p in en.pieces("鑛"))
    assert ko.decode(ko.encode(["鑛"])) == en.decode(en.encode(["鑛"])) == ["鑛"]


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_vocab_larger_than_data_is_clamped_with_warning(tmp_path, caplog, model_type):
    lines = ["가나다 라마", "hello world", "漢字 😀"]
    with caplog.at_level(logging.WARNING, logger="nmt.tokenizer"):
        tok = train_tokenizer(lines, tmp_path, "ko", 8000, model_type=model_type)
    assert 260 < tok.vocab_size < 8000
    assert "vocab_size 8000 is more than the training text supports" in caplog.text
    assert tok.decode(tok.encode(lines)) == lines


def test_deterministic_training(tmp_path):
    lines = synthetic_lines(EN_WORDS, n=800, seed=5)
    a = train_tokenizer(lines, tmp_path / "a", "en", 300, seed=4, num_threads=2)
    b = train_tokenizer(lines, tmp_path / "b", "en", 300, seed=4, num_threads=2)
    # The model files embed the (temporary) training paths, so compare the learned pieces and scores.
    sa, sb = (spm.SentencePieceProcessor(model_file=str(t.path)) for t in (a, b))
    assert [(sa.id_to_piece(i), sa.get_score(i)) for i in range(a.vocab_size)] == \
           [(sb.id_to_piece(i), sb.get_score(i)) for i in range(b.vocab_size)]
    assert a.path.with_suffix(".vocab").read_bytes() == b.path.with_suffix(".vocab").read_bytes()


def test_the_vocabulary_does_not_depend_on_the_machines_core_count(tmp_path, monkeypatch):
    """SentencePiece was trained with a thread per core, and unigram training sums its statistics by thread: the
    same data and seed gave another vocabulary (and model) on a machine with another core count."""
    rng = random.Random(0)
    syllables = [chr(0xAC00 + rng.randrange(11172)) for _ in range(300)]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(3000)]
    vocabs = []
    for cores in (1, 8):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        tok = train_tokenizer(lines, tmp_path / str(cores), "ko", 1000, seed=4)
        vocabs.append(tok.path.with_suffix(".vocab").read_bytes())
    assert vocabs[0] == vocabs[1]


@pytest.mark.parametrize("lines, match", [
    ([], "no lines given"),
    (["", "   ", "\t"], "all 3 lines are blank"),
    ("just one string", "single string"),
    (["ok", None], "line 1 is NoneType"),
])
def test_impossible_training_input(tmp_path, lines, match):
    with pytest.raises(TokenizerError, match=match):
        train_tokenizer(lines, tmp_path, "ko", 100)
    assert not tokenizer_path(tmp_path, "ko").exists()


def test_bad_training_arguments(tmp_path):
    lines = synthetic_lines(KO_WORDS, n=200)
    with pytest.raises(TokenizerError, match=r"vocab_size 100 is too small .* at least \d+"):
        train_tokenizer(lines, tmp_path, "ko", 100)
    with pytest.raises(TokenizerError, match="unknown SentencePiece model type 'wordpiece'"):
        train_tokenizer(lines, tmp_path, "ko", 400, model_type="wordpiece")
    with pytest.raises(TokenizerError, match="vocab_size must be a positive integer"):
        train_tokenizer(lines, tmp_path, "ko", 0)
    with pytest.raises(TokenizerError, match="invalid language code '../x'"):
        train_tokenizer(lines, tmp_path, "../x", 400)
    assert list(tmp_path.iterdir()) == []


def test_load_missing_corrupt_and_foreign_models(tmp_path):
    with pytest.raises(TokenizerError, match=r"spm\.ko\.model: SentencePiece model not found"):
        Tokenizer.load(tmp_path / "spm.ko.model")
    bad = tmp_path / "spm.en.model"
    bad.write_bytes(b"\x00not a model" * 20)
    with pytest.raises(TokenizerError, match=r"spm\.en\.model: not a readable SentencePiece model"):
        Tokenizer.load(bad)
    # A model trained with SentencePiece's default ids (unk=0, bos=1, eos=2, no pad) is refused.
    text = tmp_path / "text.txt"
    text.write_text("\n".join(synthetic_lines(EN_WORDS, n=200)), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "foreign"), vocab_size=50,
                                   minloglevel=2)
    with pytest.raises(TokenizerError, match=r"foreign\.model: special ids pad/unk/bos/eos are \(-1, 0, 1, 2\)"):
        Tokenizer.load(tmp_path / "foreign.model")


def test_an_empty_model_file_is_an_error_not_a_crash(tmp_path):
    """An empty spm.<lang>.model (one SentencePiece wrote short on a full disk without a word, a copy cut short) was
    taken for a model never loaded: its first use killed every command with a segmentation fault and no message."""
    empty = tmp_path / "spm.ko.model"
    empty.write_bytes(b"")
    with pytest.raises(TokenizerError, match=r"spm\.ko\.model: not a readable SentencePiece model \(an empty file\)"):
        Tokenizer.load(empty)


def test_load_or_train_reuses_existing_model(tmp_path):
    lines = synthetic_lines(EN_WORDS, n=300)
    first = load_or_train_tokenizer(tmp_path, "en", lines, 300)
    before = first.path.read_bytes()
    mtime = os.stat(first.path).st_mtime_ns

    def must_not_read():
        raise AssertionError("corpus read although the model exists")

    again = load_or_train_tokenizer(tmp_path, "en", must_not_read, 500)
    assert again.vocab_size == 300 and again.path == first.path
    assert again.path.read_bytes() == before and os.stat(again.path).st_mtime_ns == mtime
    assert again.encode(lines[:20]) == first.encode(lines[:20])
    other = load_or_train_tokenizer(tmp_path, "ko", lambda: synthetic_lines(KO_WORDS, n=300), 360)
    assert other.path == Path(tmp_path) / "spm.ko.model" and other.lang == "ko"


def test_sampled_segmentation_is_reproducible_and_spells_the_same_text(ko_tok):
    lines = synthetic_lines(KO_WORDS, n=40, seed=5)
    a, b = ko_tok.encode_sampled(lines, 0.2, seed=11), ko_tok.encode_sampled(lines, 0.2, seed=11)
    assert a == b                                       # the same seed, the same segmentation
    assert a != ko_tok.encode_sampled(lines, 0.2, seed=12)
    assert a != ko_tok.encode(lines)                    # not the best segmentation
    assert ko_tok.decode(a) == lines and UNK_ID not in {i for ids in a for i in ids}
    one = [ko_tok.encode_sampled(lines[:1], 0.2, seed=3) for _ in range(5)]   # a batch of one line too
    assert all(x == one[0] for x in one) and ko_tok.encode_sampled([], 0.2, seed=3) == []


def test_a_joint_model_serves_both_languages_with_one_id_space(tmp_path):
    """--shared-vocab: one model trained on both languages' text, loaded as source and target tokenizer."""
    assert character_coverage("ko", "en") == character_coverage("ko") < character_coverage("en") == 1.0
    lines = synthetic_lines(KO_WORDS, 800) + synthetic_lines(EN_WORDS, 800, seed=1)
    train_tokenizer(lines, tmp_path, JOINT, 400, coverage=character_coverage("ko", "en"))
    assert tokenizer_names("ko", "en", shared=True) == ("spm.joint.model", "spm.joint.model")
    assert tokenizer_names("ko", "en") == ("spm.ko.model", "spm.en.model")
    src, tgt = load_tokenizers(tmp_path, "ko", "en", shared=True)
    assert (src.lang, tgt.lang) == ("ko", "en") and src.path == tgt.path == tmp_path / "spm.joint.model"
    assert src.vocab_size == 400 and src.same_vocabulary(tgt)
    for line in ("오늘 날씨가 좋네요.", "the weather is nice"):
        ids = src.encode([line])
        assert ids == tgt.encode([line]) and UNK_ID not in ids[0] and tgt.decode(ids) == [line]
    with pytest.raises(TokenizerError, match="spm.ko.model"):
        load_tokenizers(tmp_path, "ko", "en")   # the per-language models are not there


def test_piece_of_an_id(ko_tok):
    ids = ko_tok.encode(["학교에"])[0]
    assert [ko_tok.piece(i) for i in ids] == ko_tok.pieces("학교에")
    assert ko_tok.piece(EOS_ID) == "</s>"
    with pytest.raises(TokenizerError, match=r"piece: id 360 is outside the ko vocabulary \(size 360"):
        ko_tok.piece(360)


def test_byte_pieces_of_line_and_paragraph_separators_are_not_written(ko_tok):
    """The byte pieces of U+2028 and U+2029 (LINE and PARAGRAPH SEPARATOR, not of category Cc) were written into a
    translation, as those of a line end (LF, NEL) are not: no training text holds them (read as spaces), and its text
    given back to `Translator.translate` (a round trip, back-translation in Python) was refused as several lines."""
    byte = {v: ko_tok.piece_ids([f"<0x{v:02X}>"])[0] for v in {*"\u2028\u2029똠".encode()}}
    word = ko_tok.encode(["학교에"])[0]
    seps = [byte[v] for v in "\u2028\u2029".encode()]
    ids = word + seps + [byte[v] for v in "똠".encode()]
    assert ko_tok.decode([ids]) == ["학교에똠"]
    assert ko_tok.whole_characters(ids) == list(range(len(word))) + list(range(len(ids) - 3, len(ids)))


def test_bytes_that_form_no_character_are_not_written(ko_tok):
    """A search (or a sample) may write a UTF-8 lead byte, then a syllable: SentencePiece wrote U+FFFD for each such
    byte, so Korean output held "�" (4% of an en->ko model's greedy test translations); word alignment's word
    numbers were of that text."""
    byte = {v: ko_tok.piece_ids([f"<0x{v:02X}>"])[0] for v in (0xED, 0x99, 0x80, 0xC0, 0x41, *"똠😀".encode())}
    word = ko_tok.encode(["학교에"])[0]
    kept = [byte[v] for v in "똠".encode()] + [byte[0x41]] + [byte[v] for v in "😀".encode()]
    ids = [byte[0xED]] + word + [byte[0xED], byte[0x99]] + kept + [byte[0xC0], byte[0x80], byte[0x80]]
    assert ko_tok.decode([ids]) == ["학교에똠A😀"] and "\ufffd" not in ko_tok.decode([ids])[0]
    text, words = ko_tok.piece_words(ids)
    assert text == "학교에똠A😀" and words[0] is None and words[-3:] == [None] * 3 and words[1] == 0
    start = 1 + len(word) + 2   # (after the lead byte, the word, and the lead and continuation bytes)
    assert ko_tok.whole_characters(ids) == list(range(1, 1 + len(word))) + list(range(start, start + len(kept)))
    assert ko_tok.piece_words([byte[0xED]]) == ("", [None]) and ko_tok.decode([[byte[0xED]]]) == [""]


def test_byte_pieces_of_control_characters_are_not_written(ko_tok, monkeypatch, caplog):
    """An untrained or tiny model wrote the byte pieces of control characters (U+0006, ESC before "[31m", a line
    end, the C1 CSI U+009B as <0xC2> <0x9B>) into its translations: a terminal acted on them (colours, a cursor
    moved), and a line end split nmt-translate's output line in two. No training text holds them (`never_written`):
    left out of the text, counted and warned of as the byte pieces that form no character are."""
    import logging
    import mxnet as mx
    import nmt.translate
    from nmt.config import DecodeConfig
    from nmt.translate import Translator
    byte = {v: ko_tok.piece_ids([f"<0x{v:02X}>"])[0] for v in (0x06, 0x09, 0x0A, 0x1B, 0x7F, 0xC2, 0x9B, 0xA0,
                                                                *"똠".encode())}
    word = ko_tok.encode(["학교에"])[0]
    controls = [[byte[v]] for v in (0x06, 0x09, 0x0A, 0x1B, 0x7F)] + [[byte[0xC2], byte[0x9B]]]
    ids = word + [t for c in controls for t in c] + [byte[0xC2], byte[0xA0]] + [byte[v] for v in "똠".encode()]
    assert ko_tok.decode([ids]) == ["학교에\u00a0똠"]   # (the no-break space U+00A0 is no control character)
    assert ko_tok.whole_characters(ids) == list(range(len(word))) + list(range(len(ids) - 5, len(ids)))
    assert {t for c in controls[:-1] for t in c} <= set(ko_tok.never_written())
    text, words = ko_tok.piece_words(ids)
    assert text == "학교에\u00a0똠" and words[len(word):len(word) + 7] == [None] * 7
    monkeypatch.setattr(nmt.translate, "greedy_search", lambda model, src, *a, **kw: [(ids + [EOS_ID], -1.0)] *
                        src.shape[0])
    tr = Translator(object(), ko_tok, ko_tok, DecodeConfig(beam_size=1, max_len_b=100), ctx=mx.cpu())
    with caplog.at_level(logging.WARNING, "nmt.translate"):
        assert tr.translate(["학교에"]) == ["학교에\u00a0똠"]
    assert tr.left_out == 1 and tr.bytes_left_out([ids]) == 7
    assert [r.getMessage() for r in caplog.records] == [f"input line 1: 7 {Translator.LEFT_OUT}"]
    assert "control character" in Translator.LEFT_OUT


def test_byte_pieces_left_out_of_a_translation_are_counted_and_said(ko_tok, monkeypatch, caplog):
    """Sampled translations (nmt-translate --sample, back-translation) lost the byte pieces that form no character
    when written ("▁bo ▁tu <0xC7>" as "bo tu": 45 of 300 Tatoeba-test lines of a small model over the whole
    vocabulary) and nothing said so, where a cut input or a translation at its length limit is warned of and
    counted. Now a warning names the lines, `left_out` counts them for the summary, and the service's answer gets a
    warning per sentence from `bytes_left_out`; beam search's n-best lists (which may hold such bytes too) alike."""
    import logging
    import mxnet as mx
    import nmt.translate
    from nmt.config import DecodeConfig
    from nmt.translate import Translator
    lead, syllable = ko_tok.piece_ids(["<0xED>"])[0], ko_tok.encode(["학교에"])[0]
    good, bad = syllable + [EOS_ID], [lead] + syllable + [lead, EOS_ID]   # (two lead bytes, each before no character)

    def search(model, src, src_len, *args, **kw):   # the search's output: one hypothesis per sentence, or an n-best
        nbest = kw.get("nbest", 1)
        rows = [bad if src_len[r].asscalar() > 2 else good for r in range(src.shape[0])]
        return [[(ids, -1.0)] + [(bad, -2.0)] * (nbest - 1) for ids in rows] if "nbest" in kw else \
            [(ids, -1.0) for ids in rows]
    monkeypatch.setattr(nmt.translate, "greedy_search", search)
    monkeypatch.setattr(nmt.translate, "beam_search", search)
    tr = Translator(object(), ko_tok, ko_tok, DecodeConfig(), ctx=mx.cpu())
    tr.sample = 0
    lines = ["학교에", "오늘 날씨가 좋네요 오늘 날씨가", "학교에"]
    assert [ko_tok.decode([ids]) for ids in (good, bad)] == [["학교에"], ["학교에"]]   # (the bytes leave no trace)
    with caplog.at_level(logging.WARNING, "nmt.translate"):
        assert tr.translate(lines) == ["학교에"] * 3
    said = ("byte piece(s) left out of the translation(s): UTF-8 bytes that form no whole character (SentencePiece "
            "would write U+FFFD for each) or a control character or line separator (a terminal would act on it)")
    assert [r.getMessage() for r in caplog.records] == [
        f"input line 2: 2 {said} (--sample over the whole vocabulary draws them: give it a K, e.g. --sample 10)"]
    assert tr.left_out == 1 and Translator.LEFT_OUT == said
    tr.sample = None   # a beam search's n-best list: its other translations are written too
    caplog.clear()
    with caplog.at_level(logging.WARNING, "nmt.translate"):
        assert [len(h) for h in tr.translate_nbest(lines, 2, beam_size=2, first_line=11)] == [2, 2, 2]
    assert tr.left_out == 4 and caplog.records[-1].getMessage() == f"input lines 11, 12, 13: 8 {said}"
    with tr.unreported():   # lines translated (and said) already: neither said nor counted again
        tr.translate(lines)
    assert tr.left_out == 4 and tr.bytes_left_out((good, bad, bad)) == 4 and tr.bytes_left_out(()) == 0


def test_ids_of_pieces_given_back(ko_tok):
    """What a search wrote comes back as it was: byte pieces, <unk>, <s> and <pad> (given back by a caller; the
    text drops the last two, which `dropped_pieces` counts) and a split SentencePiece
    would not choose; an end of sentence last (as an attention's pieces end) is the end, left out. One before the
    last piece is refused (the text ends at it)."""
    ids = ko_tok.encode(["학교에 😀"])[0] + [UNK_ID, BOS_ID, PAD_ID]
    assert ko_tok.dropped_pieces(ids) == 2 and ko_tok.dropped_pieces(ids[:-3]) == 0
    assert ko_tok.piece_ids([ko_tok.piece(i) for i in ids]) == ids and ko_tok.piece_ids(()) == []
    assert ko_tok.piece_ids([ko_tok.piece(i) for i in ids] + ["</s>"]) == ids and ko_tok.piece_ids(["</s>"]) == []
    for pieces, error, match in (
            ([ko_tok.piece(ids[0]), "zzz"], TokenizerError, r"^pieces\[1\] 'zzz' is not a piece of the ko vocabulary"),
            (["</s>", "</s>"], TokenizerError, r"^pieces\[0\] is the end of sentence '</s>' before the last piece: "
                                               "a translation ends at it; send the pieces before it"),
            (["\ud800"], TokenizerError, r"^pieces\[0\] '\\ud800' is not a piece"),
            ([""], TokenizerError, r"^pieces\[0\] '' is not a piece"),
            (["<unk>x"], TokenizerError, r"^pieces\[0\] '<unk>x' is not a piece"),
            ("학교", TypeError, "^pieces must be a list of pieces"),
            ([3], TypeError, r"^pieces\[0\] is int, not a piece")):
        with pytest.raises(error, match=match):
            ko_tok.piece_ids(pieces)


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_piece_words_map_each_piece_to_its_word(ko_tok, text):
    """`piece_words` (word alignments) puts every piece in the whitespace-separated word it spells: the pieces of
    word j decode to word j, byte pieces of one character included; pieces of spaces alone are in none."""
    ids = ko_tok.encode([text])[0]
    decoded, words = ko_tok.piece_words(ids)
    assert decoded == text and len(words) == len(ids)
    for j, word in enumerate(text.split()):
        assert ko_tok.decode([[t for t, w in zip(ids, words) if w == j]])[0].strip() == word
    assert all(ko_tok.decode([[t]])[0].strip() == "" for t, w in zip(ids, words) if w is None)
    assert {w for w in words if w is not None} == set(range(len(text.split())))


def test_lines_over_sentencepieces_default_length_are_trained_on(tmp_path):
    """SentencePiece leaves out lines over max_sentence_length bytes (4,192 by default) without a word: Korean past
    ~1,400 syllables, which --max-chars up to 20,000 lets through (paragraph-aligned text). A text of only such lines
    failed ("Internal: ... [!sentences_.empty()]"); beside short lines, its characters were left to byte fallback."""
    syllables = [chr(0xAC00 + i * 37) for i in range(200)]
    words = [syllables[i % 200] + syllables[(i * 7) % 200] + syllables[(i * 13) % 200] for i in range(600)]
    long = [" ".join(words[j:] + words[:j]) for j in range(0, 600, 30)]   # 2,399 characters, 7,196 bytes each
    assert min(len(x.encode()) for x in long) > 4192
    tok = train_tokenizer(long + ["짧은 문장."], tmp_path, "ko", 600)
    assert not [p for p in tok.pieces(long[0]) if p.startswith("<0x")]   # its syllables are pieces, not bytes
    assert tok.decode(tok.encode(long[:1]))[0] == long[0]
    train_tokenizer(long, tmp_path / "only", "ko", 600)   # (no error)


def test_a_signal_stops_tokenizer_training_at_once(tmp_path):
    """SentencePiece's trainer holds the GIL until it returns: Ctrl-C or SIGTERM while nmt-train trained a tokenizer
    waited for it (90 s a language on the `all` recipe; "stops at once", training.md says). It runs in a child
    process, killed as the signal's exception comes: interrupted 1 s into a training of about a minute (50 s on a
    quiet core), the exception comes within seconds, and no model is left."""
    import subprocess
    import sys
    code = """if True:
        import os, random, signal, sys, threading, time
        from nmt.tokenizer import train_tokenizer
        rng = random.Random(0)
        lines = [" ".join("".join(chr(0xAC00 + rng.randrange(400)) for _ in range(rng.randrange(1, 4)))
                          for _ in range(12)) for _ in range(60000)]
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.perf_counter()
        try:
            train_tokenizer(lines, sys.argv[1], "ko", 8000, num_threads=1)
        except KeyboardInterrupt:
            print(f"interrupted after {time.perf_counter() - t0:.0f} s")"""
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "PYTHONPATH": str(repo)})
    assert p.stdout.startswith("interrupted after ") and int(p.stdout.split()[2]) < 20, (p.stdout, p.stderr)
    assert not list(tmp_path.glob("spm*")), list(tmp_path.iterdir())


def test_a_killed_trainings_temporary_directory_goes_at_the_next_training(tmp_path, monkeypatch):
    """kill -9 (or the out-of-memory killer) while a tokenizer trained left /tmp/spm-*/train.txt, the whole training
    text, for good: nothing removed it. The next training removes such a directory, not one a live training holds
    (another run's), nor one made empty a moment ago (a live training's before it holds it)."""
    import fcntl
    import tempfile
    from nmt import spm_process
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # the system's temporary directory, here
    killed, live, young = (tmp_path / f"nmt-spm-{name}.tmp" for name in ("killed01", "livelive", "young001"))
    for d in (killed, live, young):
        d.mkdir()
    for d in (killed, live):
        (d / "train.txt").write_text("나는 학교에 갑니다\n", encoding="utf-8")
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)   # (its process trains on)
    inputs, train = [], spm_process.train
    monkeypatch.setattr(spm_process, "train", lambda seed, n, **kw: (inputs.append(Path(kw["input"])),
                                                                    train(seed, n, **kw)))
    try:
        train_tokenizer(synthetic_lines(KO_WORDS, n=200), tmp_path / "m", "ko", 360)
    finally:
        os.close(held)
    assert not killed.exists() and live.exists() and young.exists()
    [text] = inputs   # its own text was in a directory of the same kind, removed when done
    assert text.parent.parent == tmp_path and text.parent.name.startswith("nmt-spm-") and not text.parent.exists()


def test_the_trainer_process_reads_no_python_of_the_working_directory_and_dies_with_its_parent(tmp_path):
    """SentencePiece's child process ran `python -c`, which imports from the working directory first: a csv.py
    there ran once per tokenizer (a json.py broke the training). And killed with SIGKILL (kill -9, the out-of-memory
    killer), nmt-train left the child training for minutes."""
    import signal
    import subprocess
    import sys
    import time
    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "csv.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'a').write('ran')\n")
    (tmp_path / "json.py").write_text("raise SystemExit('a json.py of the working directory')\n")
    env = {**os.environ, "PYTHONPATH": str(repo)}
    code = ("import sys; from nmt.tokenizer import train_tokenizer; train_tokenizer([f'문장 {i} 번' for i in "
            "range(20001)], sys.argv[1], 'ko', 300)")   # (over IN_PROCESS_LINES: the child trains it)
    subprocess.run([sys.executable, "-P", "-c", code, str(tmp_path / "m")], cwd=tmp_path, env=env, check=True,
                   timeout=300)   # (-P: as the console scripts run, without the working directory on the path)
    assert (tmp_path / "m" / "spm.ko.model").is_file() and not (tmp_path / "ran").exists()
    big = ("import random, sys; from nmt.tokenizer import train_tokenizer; rng = random.Random(0); "
           "train_tokenizer([' '.join(''.join(chr(0xAC00 + rng.randrange(400)) for _ in range(3)) for _ in range(12)) "
           "for _ in range(60000)], sys.argv[1], 'ko', 8000, num_threads=1)")
    parent = subprocess.Popen([sys.executable, "-c", big, str(tmp_path / "big")], env=env)

    def children() -> list:   # the trainer's processes: their arguments end with the parent's pid
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                args = cmdline.read_bytes().split(b"\0")
            except OSError:
                continue
            if b"sentencepiece" in b" ".join(args) and args[-2:-1] == [str(parent.pid).encode()]:
                found.append(cmdline.parent.name)
        return found
    deadline = time.monotonic() + 120
    while not children() and time.monotonic() < deadline and parent.poll() is None:
        time.sleep(0.1)
    assert children(), "the trainer's process never started"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not children()


def test_the_trainer_process_and_this_one_train_the_same_tokenizer(tmp_path, monkeypatch):
    """Texts of up to IN_PROCESS_LINES lines are trained in this process (a child's start would cost more than a
    signal waits): the same pieces and scores as the child process gives."""
    from nmt import spm_process
    lines = [f"문장 {i} 번 입니다, sentence {i}." for i in range(300)]
    here = train_tokenizer(lines, tmp_path / "here", "ko", 400)
    monkeypatch.setattr(spm_process, "IN_PROCESS_LINES", 0)
    child = train_tokenizer(lines, tmp_path / "child", "ko", 400)
    assert here.vocab_size == child.vocab_size > 300 and here.same_vocabulary(child)


def test_a_tokenizer_trained_in_the_child_process_is_said_first(tmp_path, monkeypatch, nmt_logs):
    """SentencePiece training of millions of lines takes minutes (over IN_PROCESS_LINES, in a child process) and
    nmt-train said nothing until it was done: its start is logged. Small texts, trained in a moment, are not."""
    from nmt import spm_process
    lines = [f"문장 {i} 번 입니다, sentence {i}." for i in range(300)]
    train_tokenizer(lines, tmp_path / "here", "ko", 400)
    assert not [r for r in nmt_logs if "training the" in r.getMessage()]
    monkeypatch.setattr(spm_process, "IN_PROCESS_LINES", 0)
    train_tokenizer(lines, tmp_path / "child", "ko", 400)
    assert [r.getMessage() for r in nmt_logs if "training the" in r.getMessage()] == [
        "training the ko tokenizer on 300 lines"]


def test_subword_regularization_samples_both_sides_of_the_training_pairs(ko_tok):
    """--subword-sampling segments each training pair anew every epoch (nmt.data.subword_resegmenter): both sides,
    each from its own seed (a test audit left the target side at its best segmentation and no test failed)."""
    from nmt.config import DataConfig
    from nmt.data import EncodedData, subword_resegmenter
    lines = synthetic_lines(KO_WORDS, n=40, seed=5)
    data = EncodedData([], [], [], [], train_src_text=lines, train_tgt_text=lines[::-1])
    resegment = subword_resegmenter(DataConfig(subword_sampling=0.05), data, ko_tok, ko_tok)   # (0.2: 1 in 20 differ)
    indices = list(range(0, 40, 2))
    src, tgt = resegment(indices, 7)
    for side, text, ids in (("src", lines, src), ("tgt", lines[::-1], tgt)):
        chosen = [text[i] for i in indices]
        assert ko_tok.decode(ids) == chosen, side
        assert ids != ko_tok.encode(chosen), side   # sampled, the same text
    other = resegment(indices, 8)   # each side anew by epoch (a side whose seed is fixed samples alike each epoch)
    assert resegment(indices, 7) == (src, tgt) and other[0] != src and other[1] != tgt


@pytest.mark.parametrize("keep", [0, 100])
def test_a_model_sentencepiece_wrote_short_is_an_error_and_not_published(tmp_path, monkeypatch, keep):
    """On a full disk SentencePiece writes its model short, or empty, without a word: the model was published in the
    model directory and every command after crashed on it (a segmentation fault for an empty one)."""
    import sentencepiece as spm
    real = spm.SentencePieceTrainer.train

    def full_disk(**options):
        real(**options)
        model = Path(options["model_prefix"] + ".model")
        model.write_bytes(model.read_bytes()[:keep])
    monkeypatch.setattr(spm.SentencePieceTrainer, "train", full_disk)
    tmp = re.escape(tempfile.gettempdir())   # ($TMPDIR's, which may hold spaces)
    with pytest.raises(TokenizerError, match=rf"^SentencePiece training of the ko tokenizer failed: it wrote spm\.model "
                                             rf"\({keep} bytes\) or spm\.vocab \(\d+ pieces\) short, as on a full disk: "
                                             rf"the temporary directory {tmp}/nmt-spm-\w+\.tmp: [\d.]+ \w+ free, "
                                             r"too little for the tokenizer SentencePiece writes there; free some "
                                             r"space there or set TMPDIR to a directory with more room$"):
        train_tokenizer(synthetic_lines(KO_WORDS, n=200), tmp_path, "ko", 400)
    assert list(tmp_path.iterdir()) == []


def test_a_temporary_directory_too_full_for_sentencepieces_model_is_named(tmp_path, monkeypatch):
    """SentencePiece writes its model and vocabulary in a directory in $TMPDIR: on a full disk (a tmpfs of 120k with
    the tatoeba recipe) the run stopped with "SentencePiece training of the en tokenizer failed: Internal:
    src/trainer_interface.cc(717) [output->WriteLine(os.str())]", which names neither the disk nor TMPDIR."""
    import tempfile
    from nmt import spm_process, storage
    from nmt.storage import StorageError
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def full(seed, n, **kw):
        raise RuntimeError("Internal: src/trainer_interface.cc(717) [output->WriteLine(os.str())] ")
    monkeypatch.setattr(spm_process, "train", full)
    monkeypatch.setattr(storage, "free_bytes",   # (the figure is the temporary directory's, not the model's)
                        lambda path: 4096 if Path(path).name.startswith("nmt-spm-") else 1 << 40)
    with pytest.raises(StorageError, match=rf"^the temporary directory {tmp_path}/nmt-spm-\w+\.tmp: 4.0 KiB free, "
                                           r"too little for the en tokenizer SentencePiece writes there \(Internal: "
                                           r".*WriteLine.*\); free some space there or set TMPDIR to a directory with "
                                           r"more room$"):
        train_tokenizer(synthetic_lines(EN_WORDS, n=50), tmp_path / "m", "en", 100)
    assert [p.name for p in tmp_path.iterdir()] == []   # (its directory removed)


def test_a_full_temporary_directory_is_said_in_one_wording(tmp_path, monkeypatch):
    """Three errors said that a temporary directory in $TMPDIR was too full, each in its own words: the room check's
    "1000 bytes free, but ... need about", SentencePiece's write error's "too little for ...", and a model it wrote
    short's "in DIR, which has ... free: a full disk? (set TMPDIR to a directory with room)". One sentence now
    (`storage.scratch_full`: the directory, its free space, the TMPDIR advice), each error keeping its type."""
    import re
    import tempfile
    from nmt import spm_process, storage
    from nmt.storage import StorageError
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(storage, "free_bytes", lambda path: 4096)
    said = []
    with pytest.raises(StorageError) as e:
        storage.check_scratch_room(tmp_path, 1 << 20, "the arrays")
    said.append(str(e.value))
    real = spm_process.train

    def full(seed, n, **options):
        raise RuntimeError("Internal: src/trainer_interface.cc(717) [output->WriteLine(os.str())]")
    monkeypatch.setattr(spm_process, "train", full)
    with pytest.raises(StorageError) as e:
        train_tokenizer(synthetic_lines(EN_WORDS, n=50), tmp_path / "m", "en", 100)
    said.append(str(e.value))
    monkeypatch.setattr(spm_process, "train", real)
    write = spm.SentencePieceTrainer.train

    def short(**options):
        write(**options)
        Path(options["model_prefix"] + ".model").write_bytes(b"")
    monkeypatch.setattr(spm.SentencePieceTrainer, "train", short)
    with pytest.raises(TokenizerError) as e:
        train_tokenizer(synthetic_lines(KO_WORDS, n=200), tmp_path / "m", "ko", 400)
    said.append(str(e.value))
    from nmt import tokenizer

    def no_room(lines, path, lang):   # (its training text, the first file written in $TMPDIR: said in a fourth way,
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))   # "choose a directory on another disk")
    monkeypatch.setattr(tokenizer, "_write_training_text", no_room)
    with pytest.raises(StorageError) as e:
        train_tokenizer(synthetic_lines(EN_WORDS, n=50), tmp_path / "m", "en", 100)
    said.append(str(e.value))
    one = re.compile(r"the temporary directory (.+?): 4\.0 KiB free, too little for (.+); free some space there or set "
                     r"TMPDIR to a directory with (about [\d.]+ \w+ free|more room)$")
    found = [one.search(s) for s in said]
    assert all(found), said
    assert [m[1] for m in found][0] == str(tmp_path) and all("nmt-spm-" in m[1] for m in found[1:]), said
    assert found[0][2] == "the arrays (about 1.0 MiB needed)" and found[0][3] == "about 1.0 MiB free", said
