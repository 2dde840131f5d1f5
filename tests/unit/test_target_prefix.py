"""Target prefixes in nmt.search on untrained models: the translations start with the prefix, its tokens are scored
by the model as teacher forcing scores them, a prefix the search would have chosen anyway changes nothing, the
prefix does not count against max_len, and a sentence with a prefix decodes the same in a batch, alone, or joining
a running search."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from nmt.models.ensemble import as_model
from nmt.prefix import word_table
from nmt.search import BeamStream, beam_search, greedy_search, length_penalty
from nmt.search_blocks import Forcing, TargetPrefix
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tests.unit.test_search import (VOCAB, assert_same_hypotheses, other_member, peaked, ragged_sources,
                                    untrained_model)
from tests.unit.test_transformer import build as build_transformer


def model_of(kind):
    if kind == "transformer":
        return build_transformer(src_vocab=VOCAB, tgt_vocab=VOCAB, seed=2)
    if kind == "ensemble":
        return [peaked(untrained_model("mlp")), peaked(other_member(), 1)]
    return peaked(untrained_model("dot"))


def forced_score(model, src, src_len, tokens, limit, alpha=0.6):
    """The normalized score teacher forcing gives `tokens` (EOS included unless the search stopped at `limit`)."""
    ended = len(tokens) < limit
    tgt_in = nd.array([[BOS_ID] + tokens])
    lp = as_model(model).log_probs(src, src_len, tgt_in).asnumpy()[0].astype(np.float64)
    targets = tokens + [EOS_ID] if ended else tokens
    raw = sum(lp[t, y] for t, y in enumerate(targets))
    return raw / length_penalty(len(targets), alpha)


@pytest.mark.parametrize("kind", ["lstm", "transformer", "ensemble"])
def test_translations_start_with_the_prefix_scored_by_the_model(kind):
    model = model_of(kind)
    lengths = [5, 2, 8, 4]
    src, src_len = ragged_sources(lengths, seed=3)
    prefixes = [[7, 7, 9], None, [25], [4, 5, 6, 8, 10, 12]]
    max_len = [9, 6, 12, 7]
    greedy = greedy_search(model, src, src_len, max_len, prefixes=prefixes)
    beam = beam_search(model, src, src_len, 4, max_len, nbest=3, prefixes=prefixes)
    for i, prefix in enumerate(prefixes):
        limit = max_len[i] + len(prefix or ())
        one_src, one_len = src[i:i + 1, :lengths[i]], src_len[i:i + 1]
        for tokens, score in [greedy[i]] + beam[i]:
            assert tokens[:len(prefix or ())] == (prefix or [])
            assert len(tokens) <= limit
            np.testing.assert_allclose(score, forced_score(model, one_src, one_len, tokens, limit), rtol=1e-4)
        assert len({tuple(t) for t, _ in beam[i]}) == 3   # the beam spreads after the prefix
        assert beam[i][0][1] >= greedy[i][1] - 1e-5


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_prefix_the_search_would_choose_changes_nothing(search):
    model = model_of("lstm")
    src, src_len = ragged_sources([6, 3, 9], seed=8)
    max_len = np.array([10, 8, 12])

    def run(limits, prefixes=None):
        if search == "greedy":
            return [[h] for h in greedy_search(model, src, src_len, limits, prefixes=prefixes)]
        return beam_search(model, src, src_len, 1, limits, prefixes=prefixes)
    free = run(max_len)
    for n in (1, 3):
        # the prefix does not count against max_len: n fewer give the free search's limit
        assert_same_hypotheses(run(max_len - n, [h[0][0][:n] for h in free]), free)


def test_the_prefix_does_not_count_against_max_len():
    model = model_of("lstm")
    src, src_len = ragged_sources([4], seed=1)
    prefix = [5, 6, 7, 8, 9]
    hyps = beam_search(model, src, src_len, 3, 0, nbest=3, prefixes=[prefix])[0]
    assert [tokens for tokens, _ in hyps] == [prefix]   # the beam had no room to spread
    out = greedy_search(model, src, src_len, 2, prefixes=[prefix])[0][0]
    assert out[:5] == prefix and len(out) <= 7


def test_batched_equals_alone_and_joining_a_running_search():
    model = model_of("lstm")
    lengths = [3, 9, 1, 6, 12]
    src, src_len = ragged_sources(lengths, seed=4)
    max_len = [6, 9, 4, 7, 10]
    prefixes = [[11], None, [12, 13, 14, 15], [], [16, 17]]
    batched = beam_search(model, src, src_len, 4, max_len, nbest=2, prefixes=prefixes)
    alone = [beam_search(model, src[i:i + 1, :lengths[i]], src_len[i:i + 1], 4, max_len[i], nbest=2,
                         prefixes=[prefixes[i]])[0] for i in range(len(lengths))]
    assert_same_hypotheses(batched, alone)
    stream, out = BeamStream(model, mx.cpu(), 4, 2), {}
    stream.add(src[:2], src_len[:2], max_len[:2], [0, 1], prefixes[:2])
    out.update(stream.step())
    out.update(stream.step())   # sentence 0's prefix is done; the others join with theirs
    stream.add(src[2:], src_len[2:], max_len[2:], [2, 3, 4], prefixes[2:])
    while stream.size:
        out.update(stream.step())
    assert_same_hypotheses([out[i] for i in range(5)], alone)


def test_sampling_keeps_the_prefix():
    model = model_of("lstm")
    src, src_len = ragged_sources([5, 7], seed=6)
    mx.random.seed(3)
    out = greedy_search(model, nd.repeat(src, 20, axis=0), nd.repeat(src_len, 20, axis=0), 8, sample=0,
                        prefixes=[[9, 8]] * 40)
    assert all(tokens[:2] == [9, 8] for tokens, _ in out)
    assert len({tuple(t) for t, _ in out}) > 5   # the rest is drawn


def test_a_prefix_of_a_token_no_search_takes_is_refused():
    """Every search sets <pad> and <s> to -inf after forcing a prefix's token (`NeverChosen`), and sampling its
    `banned` tokens: a prefix of ids holding one left its row no token to take, so greedy search wrote <pad> (the
    argmax of -inf everywhere, for <s> too) with a score of -inf, and beam search gave no translation at all. Such a
    prefix is a ValueError naming it, before the search starts (a stream refusing it goes on as it was)."""
    model = model_of("lstm")
    src, src_len = ragged_sources([5, 7], seed=6)
    for prefixes, said in (([[9, PAD_ID], None], r"prefixes\[0\]\[1\] is <pad> \(id 0\), which no search writes"),
                           ([None, [BOS_ID]], r"prefixes\[1\]\[0\] is <s> \(id 2\), which no search writes"),
                           ([None, TargetPrefix([BOS_ID], *word_table(SURFACES, "\u2581ab"))], r"prefixes\[1\]\[0\]")):
        for search in (lambda: greedy_search(model, src, src_len, 5, prefixes=prefixes),
                       lambda: greedy_search(model, src, src_len, 5, sample=0, prefixes=prefixes),
                       lambda: beam_search(model, src, src_len, 3, 5, nbest=2, prefixes=prefixes),
                       lambda: beam_search(model, src, src_len, 3, 0, prefixes=prefixes)):
            with pytest.raises(ValueError, match=said):
                search()
    with pytest.raises(ValueError, match=r"prefixes\[1\]\[0\] is token 1, which `banned` keeps this search from"):
        greedy_search(model, src, src_len, 5, sample=0, prefixes=[None, [1, 9]], banned=[1])
    stream, alone = BeamStream(model, mx.cpu(), 3, 2), beam_search(model, src, src_len, 3, 5, nbest=2)
    with pytest.raises(ValueError, match=r"prefixes\[0\]\[0\] is <s>"):
        stream.add(src, src_len, 5, [0, 1], [[BOS_ID], None])
    assert stream.size == 0
    stream.add(src, src_len, 5, [0, 1])
    out = {}
    while stream.size:
        out.update(stream.step())
    assert_same_hypotheses([out[0], out[1]], alone)


def test_one_prefix_per_sentence():
    model = model_of("lstm")
    src, src_len = ragged_sources([5, 7], seed=6)
    with pytest.raises(ValueError, match="one entry per sentence"):
        beam_search(model, src, src_len, 2, 5, prefixes=[[4]])


# -- a word to complete ---------------------------------------------------------------------------------------------
# surfaces of the 30 tokens of the untrained models ("_" for SentencePiece's space mark; None: special pieces)
SURFACES = [None] * 4 + ["\u2581" + s if s[0] != "+" else s[1:] for s in [
    "a", "ab", "abc", "abcd", "+b", "+bc", "+c", "+cd", "+d", "x", "xy", "+y", "+yz", "b", "c", "+a", "+e",
    "ca", "+ab", "+ca", "y", "z", "+x", "+z", "q", "+q"]]


def test_word_table_spells_the_word_with_any_tokens_that_can_finish_it():
    allowed, sizes = word_table(SURFACES, "\u2581abc")
    words = {v: SURFACES[v] for v in range(len(SURFACES))}
    assert {words[v] for v in np.flatnonzero(allowed[0])} == {"\u2581a", "\u2581ab", "\u2581abc", "\u2581abcd"}
    assert {words[v] for v in np.flatnonzero(allowed[2])} == {"b", "bc"}   # after "▁a"
    assert {words[v] for v in np.flatnonzero(allowed[3])} == {"c", "cd", "ca"}   # after "▁ab": the rest, or more
    assert sizes[SURFACES.index("\u2581abcd")] == 5 and sizes[0] == 0
    # "▁xyq": "▁x" then "y" leaves "q", which no token but "q" spells: "▁xy" "q" and "▁x" "y" "q" only
    allowed, _ = word_table(SURFACES, "\u2581xyq")
    assert {words[v] for v in np.flatnonzero(allowed[0])} == {"\u2581x", "\u2581xy"}
    assert {words[v] for v in np.flatnonzero(allowed[2])} == {"y"} and not allowed[2, SURFACES.index("yz")]
    assert word_table(SURFACES, "\u2581w") is None   # nothing spells it
    # after a prefix's last space: a token that begins a word, or the end
    allowed, sizes = word_table(SURFACES, "\u2581", may_end=True)
    assert set(np.flatnonzero(allowed[0])) == {EOS_ID} | {v for v, s in enumerate(SURFACES) if s and s[0] == "\u2581"}
    assert sizes[EOS_ID] == 1


def spelled(tokens):
    return "".join(SURFACES[t] for t in tokens)


@pytest.mark.parametrize("kind", ["lstm", "transformer"])
def test_a_word_is_completed_by_the_tokens_that_spell_it(kind):
    model = model_of(kind)
    lengths = [5, 3, 7]
    src, src_len = ragged_sources(lengths, seed=5)
    word = "\u2581abc"
    prefixes = [TargetPrefix([20, 21], *word_table(SURFACES, word)), TargetPrefix([], *word_table(SURFACES, word)),
                None]
    max_len = [6, 6, 6]
    beam = beam_search(model, src, src_len, 4, max_len, nbest=4, prefixes=prefixes)
    greedy = greedy_search(model, src, src_len, max_len, prefixes=prefixes)
    for i, prefix in enumerate(prefixes[:2]):
        limit = max_len[i] + prefix.steps
        one_src, one_len = src[i:i + 1, :lengths[i]], src_len[i:i + 1]
        for tokens, score in [greedy[i]] + beam[i]:
            n = len(prefix.tokens)
            assert tokens[:n] == list(prefix.tokens) and spelled(tokens[n:n + 4]).startswith(word)
            np.testing.assert_allclose(score, forced_score(model, one_src, one_len, tokens, limit), rtol=1e-4)
        assert len({tuple(t) for t, _ in beam[i]}) == 4
        assert len({spelled(t[len(prefix.tokens):][:2]) for t, _ in beam[i]}) > 1, "one way of spelling the word"
        alone = beam_search(model, one_src, one_len, 4, max_len[i], nbest=4, prefixes=[prefix])
        assert_same_hypotheses(alone, [beam[i]])


def test_a_cut_of_the_free_translation_inside_a_word_changes_nothing():
    """Greedy search's own translation spells any cut of its beginning, so completing the word the cut falls in
    takes the same tokens: the most probable token is always one that fits."""
    model = untrained_model("mlp")
    vocab = [None] * 4 + [("\u2581" if v % 3 else "") + chr(97 + v % 26) for v in range(4, VOCAB)]
    checked = 0
    for seed in range(8):
        src, src_len = ragged_sources([6], seed=seed)
        free = greedy_search(model, src, src_len, 12)[0][0]
        if not free or min(free) < 4 or not vocab[free[0]].startswith("\u2581"):
            continue
        text = "".join(vocab[t] for t in free)
        ends = np.cumsum([len(vocab[t]) for t in free])   # where each token's text ends
        for cut in range(1, len(text) + 1):
            start = text.rfind("\u2581", 0, cut)   # the word the cut falls in; a "▁" always begins a token
            whole = free[:int(np.searchsorted(ends, start, side="right"))]
            prefix = TargetPrefix(whole, *word_table(vocab, text[start:cut]))
            assert greedy_search(model, src, src_len, 12, prefixes=[prefix])[0][0][:len(free)] == free
            checked += 1
    assert checked > 10, checked


def test_each_row_follows_its_back_pointer_through_the_word():
    """The characters of the word each row has written move with the beam's back-pointers: row k continues from
    the row it extends, not from row k."""
    allowed, sizes = word_table(SURFACES, "\u2581abc")
    forcing = Forcing(mx.cpu())
    forcing.add([7], [TargetPrefix([], allowed, sizes)], np.array([5]))
    ids, tok = np.array([7]), SURFACES.index

    def free_tokens(rows):   # per row, the tokens the step allows (None: every one)
        lp = forcing.apply(nd.zeros((3, VOCAB)), ids, 3).asnumpy()
        return [None if (lp[r] == 0).all() else {SURFACES[v] for v in np.flatnonzero(lp[r] == 0)} for r in rows]
    assert free_tokens([0])[0] == {"\u2581a", "\u2581ab", "\u2581abc", "\u2581abcd"}
    forcing.after(ids, 3, nd.array([tok("\u2581a"), tok("\u2581ab"), tok("\u2581abc")]), nd.array([0, 0, 0]))
    assert free_tokens([0, 1]) == [{"b", "bc"}, {"c", "cd", "ca"}]
    assert free_tokens([2]) == [None]   # the word is written: anything
    # row 0 extends row 1 ("▁ab" + "c": done), row 1 extends row 0 ("▁a" + "b": "c" still to come)
    forcing.after(ids, 3, nd.array([tok("c"), tok("b"), tok("x")]), nd.array([1, 0, 2]))
    assert free_tokens([1]) == [{"c", "cd", "ca"}]
    assert free_tokens([0, 2]) == [None, None]
    forcing.after(ids, 3, nd.array([tok("x"), tok("cd"), tok("x")]), nd.array([0, 1, 2]))
    assert not forcing.progress   # every row is past the word: the sentence is free
