"""Word links from attention (`nmt.align`): argmax per target piece, pieces grouped into words, EOS unlinked."""
from __future__ import annotations

import numpy as np

from nmt.align import format_links, word_links


def test_word_links_take_each_target_pieces_strongest_source_piece():
    # source pieces: word 0 = pieces 0-1, a piece of spaces alone, word 1 = piece 3, then the source EOS
    src_words = [0, 0, None, 1]
    # target pieces: word 0 = pieces 0-1, word 1 = piece 2, then the target EOS row
    tgt_words = [0, 0, 1]
    weights = np.array([[0.1, 0.1, 0.0, 0.7, 0.1],    # -> source word 1
                        [0.6, 0.1, 0.0, 0.2, 0.1],    # -> source word 0: target word 0 has two links
                        [0.1, 0.1, 0.0, 0.1, 0.7],    # peaks on the source EOS: no link
                        [0.1, 0.8, 0.0, 0.0, 0.1]])   # the target EOS row: never a word
    assert word_links(weights, src_words, tgt_words) == [(0, 0), (1, 0)]
    weights[2] = [0.0, 0.9, 0.0, 0.1, 0.0]   # two pieces of one word pair give one link
    weights[1] = [0.0, 0.2, 0.0, 0.8, 0.0]
    assert word_links(weights, src_words, tgt_words) == [(0, 1), (1, 0)]
    assert word_links(np.array([[0.0, 0.0, 1.0, 0.0, 0.0]]), src_words, [0]) == []   # a piece of spaces


def test_format_links_is_pharaoh():
    assert format_links([(0, 1), (1, 0), (12, 3)]) == "0-1 1-0 12-3"
    assert format_links([]) == ""
