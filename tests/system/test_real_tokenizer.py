"""The SentencePiece tokenizer on the real Korean side of Tatoeba from the offline mirror."""
from __future__ import annotations

import unicodedata

from nmt.tokenizer import train_tokenizer


def test_real_tatoeba_korean_round_trip(shared_data, tmp_path):
    path = shared_data / "tatoeba-kor-eng-manythings" / "kor.txt"
    pairs = [line.rstrip("\n").split("\t") for line in path.open(encoding="utf-8")]
    ko = [p[1] for p in pairs]
    tok = train_tokenizer(ko, tmp_path, "ko", 4000)
    assert tok.decode(tok.encode(ko)) == [unicodedata.normalize("NFC", x) for x in ko]
    ids = tok.encode(ko)
    assert sum(map(len, ids)) < sum(map(len, ko))  # subwords: fewer tokens than characters
