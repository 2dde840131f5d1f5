"""The encoded corpus as flat arrays: the same ids as Tokenizer.encode, a cache keyed by text and tokenizers that a
rerun reuses, memory-mapped, and re-encoded when damaged or stale."""
from __future__ import annotations

import numpy as np
import pytest

from nmt import encoded
from nmt.encoded import FlatIds, RowsView, encode_flat, load_or_encode
from nmt.tokenizer import train_tokenizer
from tests.synth import make_pairs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    pairs = make_pairs(600, seed=5)
    ko, en = [p[0] for p in pairs], [p[1] for p in pairs]
    return d, ko, en, train_tokenizer(ko, d, "ko", 400), train_tokenizer(en, d, "en", 400)


def test_flat_ids_equal_tokenizer_encode(corpus):
    _, ko, _, tok, _ = corpus
    flat = encode_flat(tok, ko, chunk=97)   # several chunks, the last one partial
    assert len(flat) == len(ko) and [list(x) for x in flat] == tok.encode(ko)
    assert flat.ids.dtype == np.int32 and flat.lengths.tolist() == [len(x) for x in tok.encode(ko)]
    view = RowsView(flat, np.array([5, 2, 599]))
    assert [list(x) for x in view] == [tok.encode([ko[i]])[0] for i in (5, 2, 599)]
    assert view.lengths.tolist() == [len(view[i]) for i in range(3)]
    with pytest.raises(ValueError, match="offsets end"):
        FlatIds(np.zeros(3, np.int32), np.array([0, 2]))


def test_cache_is_reused_memory_mapped_and_replaced_when_stale(corpus, tmp_path):
    _, ko, en, src_tok, tgt_tok = corpus
    src, tgt, hit = load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    assert not hit and len(list(tmp_path.glob("encoded.*.npy"))) == 4
    src2, tgt2, hit = load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    assert hit and isinstance(src2.ids, np.memmap)
    assert np.array_equal(src.ids, src2.ids) and np.array_equal(tgt.offsets, tgt2.offsets)
    _, _, hit = load_or_encode(tmp_path, src_tok, tgt_tok, ko[:-1] + ["바뀐 문장"], en)   # other text: other key
    assert not hit and len(list(tmp_path.glob("encoded.*.npy"))) == 4                 # the stale entry is gone


def test_a_truncated_cache_is_encoded_again(corpus, tmp_path):
    _, ko, en, src_tok, tgt_tok = corpus
    load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    ids = next(tmp_path.glob("encoded.*.src.ids.npy"))
    ids.write_bytes(ids.read_bytes()[:100])
    src, _, hit = load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    assert not hit and [list(x) for x in src] == src_tok.encode(ko)


def test_a_damaged_cache_of_the_same_size_is_encoded_again(corpus, tmp_path, caplog):
    """Ids overwritten in place (valid ids, the same size) were reused without a word: a resumed run trained on other
    batches (a helper's dev perplexity 377 against 174). The arrays' sums are saved beside them and checked."""
    _, ko, en, src_tok, tgt_tok = corpus
    load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    ids = next(tmp_path.glob("encoded.*.tgt.ids.npy"))
    damaged = np.load(ids)
    damaged[:] = 5
    np.save(ids, damaged)
    with caplog.at_level("WARNING", logger="nmt.data"):
        _, tgt, hit = load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    assert not hit and [list(x) for x in tgt] == tgt_tok.encode(en)
    assert "damaged: its arrays do not match the sums in encoded." in caplog.text
    assert load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)[2]   # its sums saved again: reused
    next(tmp_path.glob("encoded.*.json")).unlink()   # without them (a cache of an earlier version): encoded again
    assert not load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)[2]


@pytest.mark.parametrize("damage", ["big-endian", "unsigned", "header length", "broken header", "empty sums"])
def test_a_cache_whose_header_is_damaged_is_encoded_again(corpus, tmp_path, damage, caplog):
    """The sums cover the arrays' bytes, not the .npy header: one bit there ('<i4' read as '>i4') trained on ids in
    the billions without a word (an embedding clips them); others ended in numpy's TokenError or SyntaxError, and an
    empty sums file was said to be missing."""
    _, ko, en, src_tok, tgt_tok = corpus
    load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    ids = next(tmp_path.glob("encoded.*.tgt.ids.npy"))
    data = bytearray(ids.read_bytes())
    if damage == "big-endian":
        data[data.index(b"'<i4'") + 1] = ord(">")
    elif damage == "unsigned":
        data[data.index(b"'<i4'") + 2] = ord("u")
    elif damage == "header length":
        data[9] ^= 2
    elif damage == "broken header":
        data[data.index(b"'descr'") + 1] ^= 16
    else:
        next(tmp_path.glob("encoded.*.json")).write_text("{}")
    ids.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="nmt.data"):
        src, tgt, hit = load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    assert not hit and [list(x) for x in tgt] == tgt_tok.encode(en) and [list(x) for x in src] == src_tok.encode(ko)
    assert "encoding it again" in caplog.text and (damage != "empty sums" or "damaged: its arrays" in caplog.text)


def test_a_disk_without_room_for_the_cache_names_what_the_whole_cache_needs(corpus, tmp_path, monkeypatch):
    """A full disk as the cache was written named the size of the one array being written ("about 1.2 KiB needed"
    for the source ids of a cache of four), so a user could not tell how much room to make. The room for all the
    arrays is checked before any is written, and a disk that fills meanwhile asks for it too."""
    import errno
    import os
    import re
    from nmt import storage
    _, ko, en, src_tok, tgt_tok = corpus
    # each array with its .npy header, in whole blocks of 4 KiB, and a block for the sums: the check passed where the
    # arrays' bytes alone fitted and the writes then failed
    size = sum(-(-(a.nbytes + 128) // 4096) * 4096 for flat in (encode_flat(src_tok, ko), encode_flat(tgt_tok, en))
               for a in (flat.ids, flat.offsets)) + 4096
    whole = storage.human_bytes(size)
    monkeypatch.setattr(storage, "free_bytes", lambda path: 1000)
    with pytest.raises(storage.StorageError, match=rf"^--model-dir {re.escape(str(tmp_path))}: 1000 bytes free, but "
                                                   rf"the encoded training corpus's arrays \(encoded\.[0-9a-f]{{16}}"
                                                   rf"\.\*\.npy\) need about {whole}; free some space or choose"):
        load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    assert not list(tmp_path.iterdir())   # found before any was written
    saves, save = [], np.save

    def fill_at_the_third(f, arr):   # the target ids: the disk filled by another process meanwhile
        saves.append(arr)
        if len(saves) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        save(f, arr)
    monkeypatch.setattr(storage, "free_bytes", lambda path: 2 ** 20)   # room enough as the writes start
    monkeypatch.setattr(np, "save", fill_at_the_third)
    with pytest.raises(storage.StorageError, match=r"encoded\.[0-9a-f]{16}\.tgt\.ids\.npy: No space left on device "
                                                   rf"\[errno ENOSPC\]; 1\.0 MiB free, about {whole} needed"):
        load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    monkeypatch.setattr(np, "save", save)
    sizes, written = [], encoded._written   # the sums file too: a next run without it writes the whole cache again
    monkeypatch.setattr(encoded, "_written", lambda path, n: (sizes.append(n), written(path, n))[1])
    load_or_encode(tmp_path, src_tok, tgt_tok, ko, en)
    assert sizes == [size] * 5


def test_dev_pairs_cut_for_the_dev_loss_are_counted(corpus, caplog):
    """Dev pairs over --max-src-tokens / --max-tgt-tokens were cut for the dev loss and perplexity (a false end of
    sentence scored: what --valid-metric ppl picks by) without a word."""
    from nmt.config import Config
    from nmt.corpus import Pairs
    from nmt.data import encode_data
    from nmt.recipes import DatasetSplits
    _, ko, en, src_tok, tgt_tok = corpus
    cfg = Config()
    cfg.data.max_src_tokens = cfg.data.max_tgt_tokens = 6
    dev = Pairs(ko[:40], en[:40], "dev")
    longer = sum(len(s) > 6 or len(t) > 6 for s, t in zip(src_tok.encode(dev.src), tgt_tok.encode(dev.tgt)))
    assert 0 < longer < 40
    with caplog.at_level("INFO", logger="nmt"):
        data = encode_data(cfg, DatasetSplits(Pairs(ko, en, "train"), dev, {}), src_tok, tgt_tok)
    assert f"{longer} of 40 dev pairs are cut to --max-src-tokens 6 / --max-tgt-tokens 6" in caplog.text
    assert max(map(len, data.dev_src)) <= 6


def test_a_long_encoding_says_how_far_it_got(corpus, monkeypatch, nmt_logs):
    """Encoding millions of training pairs takes minutes (5 M pairs: 381 s, docs/performance.md), and training said
    nothing meanwhile: a 2 M-pair run was silent from its settings to its batches. It logs how far it got every
    REPORT_SECONDS (here at every chunk), not after the last chunk."""
    from nmt import log
    _, ko, _, tok, _ = corpus
    monkeypatch.setattr(log, "REPORT_SECONDS", 0.0)
    encode_flat(tok, ko, chunk=250)
    said = [r.getMessage() for r in nmt_logs if "so far" in r.getMessage()]
    assert said == [f"encoding the ko side: {n} of 600 lines encoded so far" for n in (250, 500)]
