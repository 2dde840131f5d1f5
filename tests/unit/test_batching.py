"""Bucketed batching: triples, padding, determinism, device splits, exact resume."""
from __future__ import annotations

import json

import numpy as np
import pytest

from nmt.batching import BatchError, BatchIterator, make_batch, pad_sources, split_batch
from nmt.sampler import BUCKETINGS, BucketSampler, bucket_examples
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID


def synthetic_ids(n=500, seed=0, max_len=40):
    """Token-id pairs with correlated lengths (ids >= 4, so never a special id)."""
    rng = np.random.default_rng(seed)
    src_lens = rng.integers(1, max_len, size=n)
    tgt_lens = np.clip(src_lens + rng.integers(-3, 4, size=n), 1, None)
    src = [rng.integers(4, 1000, size=k).tolist() for k in src_lens]
    tgt = [rng.integers(4, 1000, size=k).tolist() for k in tgt_lens]
    return src, tgt


def lens(seqs):
    return [len(s) for s in seqs]


def all_batches(sampler):
    return [(idx.tolist(), s, t) for idx, s, t in sampler]


def test_make_batch_triples_and_lengths():
    src = [[10, 11, 12], [20]]
    tgt = [[30, 31], [40, 41, 42, 43]]
    b = make_batch(src, tgt, [1, 0], src_pad_len=5, tgt_pad_len=6)
    assert b.src.dtype == b.tgt_in.dtype == b.tgt_out.dtype == b.src_len.dtype == b.tgt_len.dtype == np.int32
    assert b.src.tolist() == [[20, EOS_ID, PAD_ID, PAD_ID, PAD_ID], [10, 11, 12, EOS_ID, PAD_ID]]
    assert b.src_len.tolist() == [2, 4]
    assert b.tgt_in.tolist() == [[BOS_ID, 40, 41, 42, 43, PAD_ID], [BOS_ID, 30, 31, PAD_ID, PAD_ID, PAD_ID]]
    assert b.tgt_out.tolist() == [[40, 41, 42, 43, EOS_ID, PAD_ID], [30, 31, EOS_ID, PAD_ID, PAD_ID, PAD_ID]]
    assert b.tgt_len.tolist() == [5, 3]
    # target-in shifted left by one is target-out, on the real positions
    for r in range(2):
        n = b.tgt_len[r]
        assert b.tgt_in[r, 1:n].tolist() == b.tgt_out[r, :n - 1].tolist()
    assert (b.num_sentences, b.num_tgt_tokens, b.num_src_tokens, len(b)) == (2, 8, 6, 2)


def test_make_batch_empty_sentences_and_too_long():
    b = make_batch([[]], [[]], [0], 1, 1)
    assert b.src.tolist() == [[EOS_ID]] and b.tgt_in.tolist() == [[BOS_ID]] and b.tgt_out.tolist() == [[EOS_ID]]
    with pytest.raises(BatchError, match=r"example 7: source has 3 tokens \+ EOS, longer than the padded length 3"):
        make_batch({7: [5, 5, 5]}, {7: [5]}, [7], 3, 5)
    with pytest.raises(BatchError, match=r"example 0: target has 2 tokens"):
        make_batch([[5]], [[5, 6]], [0], 3, 2)
    src, src_len = pad_sources([[5, 6], []], 4)
    assert src.tolist() == [[5, 6, EOS_ID, PAD_ID], [EOS_ID, PAD_ID, PAD_ID, PAD_ID]] and src_len.tolist() == [3, 1]


def bucket_sizes(sampler):
    """Examples per bucket, in the order of `bucket_shapes`: one epoch's batches counted by shape."""
    sizes = dict.fromkeys(map(tuple, sampler.bucket_shapes), 0)
    for idx, s, t in sampler:
        sizes[(s, t)] += len(idx)
    return list(sizes.values())


@pytest.mark.parametrize("bucketing", BUCKETINGS)
def test_padding_only_to_bucket_lengths_and_few_shapes(bucketing):
    src, tgt = synthetic_ids(800)
    sampler = BucketSampler(lens(src), lens(tgt), batch_size=16, num_buckets=5, bucketing=bucketing, seed=3)
    assert sampler.bucketing == bucketing and sum(bucket_sizes(sampler)) == 800
    assert len(sampler.bucket_shapes) <= 5
    shapes = set()
    for idx, s, t in sampler:
        assert (s, t) in sampler.bucket_shapes
        b = make_batch(src, tgt, idx, s, t)
        shapes.add(b.src.shape[1:] + b.tgt_in.shape[1:])
        assert b.src_len.max() <= s and b.tgt_len.max() <= t
    assert len(shapes) == len(sampler.bucket_shapes)
    # each bucket is as long as its longest member (no padding beyond the bucket's need), and short examples
    # do not land in the longest bucket
    longest = max(lens(src)) + 1, max(lens(tgt)) + 1
    assert sampler.bucket_shapes[-1] == longest
    assert sampler.bucket_shapes[0][0] < longest[0] / 2
    for members, (s, t) in zip(sampler._members, sampler.bucket_shapes):
        assert max(len(src[i]) for i in members) + 1 == s and max(len(tgt[i]) for i in members) + 1 == t


def _positions(s_pad, t_pad, bucket):
    """What a step computes over an epoch: examples x (longest source + longest target), summed over buckets."""
    return sum(int((bucket == k).sum()) * (int(s_pad[bucket == k].max()) + int(t_pad[bucket == k].max()))
               for k in np.unique(bucket))


def _least_positions_by_brute_force(s_pad, t_pad, num_buckets):
    """Every split of the distinct max(source, target) lengths into at most `num_buckets` runs."""
    from itertools import combinations
    key = np.maximum(s_pad, t_pad)
    values = np.unique(key)
    best = None
    for k in range(min(num_buckets, len(values))):
        for cuts in combinations(values[1:], k):
            cost = _positions(s_pad, t_pad, np.searchsorted(np.asarray(cuts, dtype=np.int64), key, side="right"))
            best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_padding_bucketing_is_the_split_that_pads_least(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    s_pad = rng.integers(1, 14, size=n)
    t_pad = np.clip(s_pad + rng.integers(-2, 3, size=n), 1, None)
    for num_buckets in (1, 2, 3, 4):
        bucket = bucket_examples(s_pad, t_pad, num_buckets, "padding")
        assert len(np.unique(bucket)) <= num_buckets and sorted(np.unique(bucket)) == list(range(bucket.max() + 1))
        # numbered in order of length
        key = np.maximum(s_pad, t_pad)
        assert all(key[bucket == k].max() < key[bucket == k + 1].min() for k in range(bucket.max()))
        assert _positions(s_pad, t_pad, bucket) == _least_positions_by_brute_force(s_pad, t_pad, num_buckets)


def test_padding_bucketing_gives_a_long_tail_buckets_of_its_own():
    """Quantile boundaries pad the longest 1/num_buckets of the examples to the single longest one; the padding
    scheme splits that tail (a corpus like Tatoeba: mostly short sentences, a few very long ones)."""
    rng = np.random.default_rng(4)
    src_lens = np.concatenate([rng.integers(3, 15, size=2000), rng.integers(15, 25, size=150), [50, 60, 70]])
    tgt_lens = src_lens + rng.integers(-2, 3, size=len(src_lens)).clip(-2, None)
    quantile = BucketSampler(src_lens, tgt_lens, batch_size=64, num_buckets=8, bucketing="quantile")
    padding = BucketSampler(src_lens, tgt_lens, batch_size=64, num_buckets=8, bucketing="padding")
    assert quantile.real_fraction < 0.6 < 0.85 < padding.real_fraction
    assert bucket_sizes(quantile)[-1] > 250 and bucket_sizes(padding)[-1] < 10   # the tail's bucket
    assert len(padding.bucket_shapes) == 8 and len(padding) <= -(-len(src_lens) // 64) + 7   # a partial batch per bucket at most
    real = (src_lens + 1).sum() + (tgt_lens + 1).sum()
    computed = sum(len(idx) * (s + t) for idx, s, t in padding)
    assert padding.real_fraction == pytest.approx(real / computed)


def test_every_example_exactly_once_per_epoch():
    src, tgt = synthetic_ids(333)
    sampler = BucketSampler(lens(src), lens(tgt), batch_size=10, seed=1)
    for epoch in range(3):
        assert sampler.epoch == epoch
        batches = all_batches(sampler)
        assert len(batches) == len(sampler)
        seen = sorted(i for idx, _, _ in batches for i in idx)
        assert seen == list(range(333))
        assert all(1 <= len(idx) <= 10 for idx, _, _ in batches)
    assert (sampler.epoch, sampler.position) == (3, 0)


def test_deterministic_from_seed_and_different_across_epochs():
    src, tgt = synthetic_ids(400)
    a = BucketSampler(lens(src), lens(tgt), batch_size=8, seed=5)
    b = BucketSampler(lens(src), lens(tgt), batch_size=8, seed=5)
    c = BucketSampler(lens(src), lens(tgt), batch_size=8, seed=6)
    a0, a1 = all_batches(a), all_batches(a)
    b.set_epoch(1)
    assert all_batches(b) == a1
    b.set_epoch(0)
    assert all_batches(b) == a0
    assert a0 != a1
    assert all_batches(c) != a0
    # both levels of the shuffle (either alone passed the lines above): the buckets' batches mixed in an epoch, not
    # all of one bucket's in a row (all short sentences, then all long ones), and the sentences grouped anew each
    # epoch, not the same batches in another order
    runs = 1 + sum(x[1:] != y[1:] for x, y in zip(a0, a0[1:]))
    assert runs > 2 * len({b[1:] for b in a0}) and [b[1:] for b in a0] != [b[1:] for b in a1]   # (each epoch's own)
    assert {tuple(sorted(b[0])) for b in a0}.isdisjoint({tuple(sorted(b[0])) for b in a1 if len(b[0]) > 1})
    unshuffled = BucketSampler(lens(src), lens(tgt), batch_size=8, shuffle=False)
    assert all_batches(unshuffled) == all_batches(unshuffled)


def test_batch_tokens_limit():
    src, tgt = synthetic_ids(600)
    sampler = BucketSampler(lens(src), lens(tgt), batch_tokens=200, num_buckets=6)
    sizes = {}
    for idx, s, t in sampler:
        b = make_batch(src, tgt, idx, s, t)
        assert b.tgt_in.size <= 200 and len(idx) * t <= 200
        sizes.setdefault(t, set()).add(len(idx))
    # short buckets take more sentences than long ones; each bucket's full batches use the whole budget
    assert max(sizes[min(sizes)]) > max(sizes[max(sizes)])
    for t, rows in sizes.items():
        assert max(rows) == 200 // t
    longest = max(t for _, t in sampler.bucket_shapes)
    with pytest.raises(BatchError, match=rf"--batch-tokens {longest - 1} cannot hold one sentence of the longest "
                                         rf"length bucket \({longest} target positions\); give --batch-tokens "
                                         rf"{longest} or more"):
        BucketSampler(lens(src), lens(tgt), batch_tokens=longest - 1)
    assert BucketSampler(lens(src), lens(tgt), batch_tokens=longest).bucket_batch_sizes[-1] == 1


def test_split_into_equal_shares_with_filler_rows():
    src, tgt = synthetic_ids(50)
    batch = make_batch(src, tgt, list(range(7)), max(lens(src[:7])) + 1, max(lens(tgt[:7])) + 1)
    shares = split_batch(batch, 3)
    assert [len(s) for s in shares] == [3, 3, 3]
    assert all(s.src.shape == shares[0].src.shape and s.tgt_out.shape == shares[0].tgt_out.shape for s in shares)
    last = shares[2]
    assert last.tgt_len.tolist()[1:] == [0, 0] and last.src_len.tolist()[1:] == [1, 1]
    assert (last.src[1:, 0] == EOS_ID).all() and (last.src[1:, 1:] == PAD_ID).all()
    assert (last.tgt_out[1:] == PAD_ID).all() and (last.tgt_in[1:, 0] == BOS_ID).all()
    assert sum(s.num_sentences for s in shares) == 7
    assert sum(s.num_tgt_tokens for s in shares) == batch.num_tgt_tokens
    assert sum(s.num_src_tokens for s in shares) == batch.num_src_tokens
    # a length-masked loss: filler rows contribute exactly zero
    for share in shares:
        mask = np.arange(share.tgt_out.shape[1])[None, :] < share.tgt_len[:, None]
        per_token = np.where(mask, np.log1p(share.tgt_out.astype(np.float64)), 0.0)
        assert per_token[share.tgt_len == 0].sum() == 0.0
    assert split_batch(batch, 1) == [batch]
    with pytest.raises(BatchError, match="positive integer"):
        split_batch(batch, 0)


def _concat_real_rows(shares):
    keep = [s.tgt_len > 0 for s in shares]
    return {f: np.concatenate([getattr(s, f)[k] for s, k in zip(shares, keep)])
            for f in ("src", "src_len", "tgt_in", "tgt_out", "tgt_len")}


@pytest.mark.parametrize("num_shards", [1, 2, 4])
def test_global_batches_do_not_depend_on_the_split(num_shards):
    src, tgt = synthetic_ids(300)
    reference = list(BatchIterator(src, tgt, BucketSampler(lens(src), lens(tgt), batch_size=9, seed=2), prefetch=0))
    it = BatchIterator(src, tgt, BucketSampler(lens(src), lens(tgt), batch_size=9, seed=2), prefetch=2)
    got = list(it)
    assert len(got) == len(reference)
    for ref, batch in zip(reference, got):
        shares = split_batch(batch, num_shards)
        assert len(shares) == num_shards and len({s.src.shape for s in shares}) == 1
        joined = _concat_real_rows(shares)
        for f, arr in joined.items():
            assert np.array_equal(arr, getattr(ref, f)), f


@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_mid_epoch_yields_exactly_the_remaining_batches(prefetch):
    src, tgt = synthetic_ids(400, seed=4)
    make = lambda: BatchIterator(src, tgt, BucketSampler(lens(src), lens(tgt), batch_size=12, seed=7), prefetch)
    full = make()
    epoch0, epoch1 = list(full), list(full)
    run = make()
    seen = []
    for k, batch in enumerate(run):
        seen.append(batch)
        if k == 10:
            state = json.loads(json.dumps(run.state_dict()))  # must survive a checkpoint file
            break
    assert state["epoch"] == 0 and state["position"] == 11  # counts consumed batches, not prefetched ones
    resumed = make()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(seen) + len(rest) == len(epoch0)
    for a, b in zip(seen + rest, epoch0):
        assert np.array_equal(a.src, b.src) and np.array_equal(a.tgt_out, b.tgt_out)
    assert resumed.state_dict()["epoch"] == 1 and resumed.state_dict()["position"] == 0
    assert all(np.array_equal(a.tgt_in, b.tgt_in) for a, b in zip(list(resumed), epoch1))
    # the interrupted iterator itself continues where it stopped, too
    again = list(run)
    assert all(np.array_equal(a.src, b.src) for a, b in zip(again, epoch0[11:])) and len(again) == len(epoch0) - 11


def test_state_at_epoch_end_resumes_at_next_epoch():
    src, tgt = synthetic_ids(100)
    sampler = BucketSampler(lens(src), lens(tgt), batch_size=30)
    it = iter(sampler)
    for _ in range(len(sampler)):
        next(it)
    state = sampler.state_dict()
    assert (state["epoch"], state["position"]) == (0, len(sampler))
    other = BucketSampler(lens(src), lens(tgt), batch_size=30)
    other.load_state_dict(state)
    assert all_batches(other) == [] and (other.epoch, other.position) == (1, 0)


def test_fingerprint_mismatch_and_bad_state():
    src, tgt = synthetic_ids(100)
    sampler = BucketSampler(lens(src), lens(tgt), batch_size=8, seed=1)
    state = sampler.state_dict()
    json.dumps(state)
    changed_data = BucketSampler(lens(src[:-1]), lens(tgt[:-1]), batch_size=8, seed=1)
    with pytest.raises(BatchError, match=r"other training data or batching settings .*'num_examples': 100"):
        changed_data.load_state_dict(state)
    edited = lens(src)
    edited[0] += 1   # a line of a training file edited: the same counts, and the message printed two equal dicts
    with pytest.raises(BatchError, match=r"the same counts and settings, so the content of the training files "
                                         r"changed .*--init-from"):
        BucketSampler(edited, lens(tgt), batch_size=8, seed=1).load_state_dict(state)
    edited = lens(tgt)
    edited[0] += 1   # (a target line: the fingerprint covers both sides)
    with pytest.raises(BatchError, match=r"the same counts and settings, so the content of the training files"):
        BucketSampler(lens(src), edited, batch_size=8, seed=1).load_state_dict(state)
    changed_cfg = BucketSampler(lens(src), lens(tgt), batch_size=16, seed=1)
    with pytest.raises(BatchError, match="fingerprint"):
        changed_cfg.load_state_dict(state)
    with pytest.raises(BatchError, match="saved with seed 1, this run uses seed 2"):
        BucketSampler(lens(src), lens(tgt), batch_size=8, seed=2).load_state_dict(state)
    with pytest.raises(BatchError, match="position 999"):
        sampler.load_state_dict({**state, "position": 999})
    with pytest.raises(BatchError, match="lacks fingerprint"):
        sampler.load_state_dict({"epoch": 0, "position": 0, "seed": 1})
    with pytest.raises(BatchError, match=r"'bucketing': 'padding'.*'bucketing': 'quantile'"):
        BucketSampler(lens(src), lens(tgt), batch_size=8, seed=1, bucketing="quantile").load_state_dict(state)


def test_bad_sampler_and_iterator_arguments():
    src, tgt = synthetic_ids(20)
    with pytest.raises(BatchError, match="exactly one of batch_size"):
        BucketSampler(lens(src), lens(tgt))
    with pytest.raises(BatchError, match="exactly one of batch_size"):
        BucketSampler(lens(src), lens(tgt), batch_size=4, batch_tokens=100)
    with pytest.raises(BatchError, match="20 source lengths but 19 target lengths"):
        BucketSampler(lens(src), lens(tgt)[:-1], batch_size=4)
    with pytest.raises(BatchError, match="no training examples"):
        BucketSampler([], [], batch_size=4)
    with pytest.raises(BatchError, match="num_buckets must be a positive integer"):
        BucketSampler(lens(src), lens(tgt), batch_size=4, num_buckets=0)
    with pytest.raises(BatchError, match=r"bucketing \(--bucketing\) must be one of padding, quantile, got 'sorted'"):
        BucketSampler(lens(src), lens(tgt), batch_size=4, bucketing="sorted")
    sampler = BucketSampler(lens(src), lens(tgt), batch_size=4)
    with pytest.raises(BatchError, match="built for 20 examples, got 19"):
        BatchIterator(src[:-1], tgt[:-1], sampler)
    bad_tgt = list(tgt)
    bad_tgt[5] = bad_tgt[5] + [7]
    with pytest.raises(BatchError, match=rf"example 5: target has {len(tgt[5]) + 1} tokens"):
        BatchIterator(src, bad_tgt, sampler)


def test_prefetch_errors_reach_the_consumer_and_thread_stops():
    import threading

    class Exploding(list):
        def __getitem__(self, i):
            if i == 13:
                raise RuntimeError("boom at 13")
            return list.__getitem__(self, i)

    src, tgt = synthetic_ids(60)
    it = BatchIterator(Exploding(src), tgt, BucketSampler(lens(src), lens(tgt), batch_size=1, shuffle=False), 2)
    with pytest.raises(RuntimeError, match="boom at 13"):
        list(it)
    # early exit: the prefetch thread is joined and the position counts only what was consumed
    it = BatchIterator(src, tgt, BucketSampler(lens(src), lens(tgt), batch_size=4), 4)
    gen = iter(it)
    next(gen), next(gen)
    gen.close()
    assert it.state_dict()["position"] == 2
    assert not any(t.name == "nmt-batch-prefetch" for t in threading.enumerate())


def _resegmenter(src, tgt, longer_by=1):
    """A stand-in segmenter: every sentence one token longer (as sampled segmentations mostly are), the extra
    token drawn from the seed, and a few much longer (so that they cannot fit their bucket)."""
    def resegment(indices, seed):
        rng = np.random.RandomState(seed)
        extra = rng.randint(4, 50, size=len(indices))
        out_s = [list(src[i]) + [int(e)] * (longer_by if i % 7 else 100) for i, e in zip(indices, extra)]
        out_t = [list(tgt[i]) + [int(e)] * longer_by for i, e in zip(indices, extra)]
        return out_s, out_t
    return resegment


@pytest.mark.parametrize("prefetch", [0, 2])
def test_resegmented_batches_fit_their_shapes_and_repeat_exactly_on_resume(prefetch):
    src, tgt = synthetic_ids(200, seed=4)
    make = lambda: BatchIterator(src, tgt, BucketSampler(lens(src), lens(tgt), batch_size=12, seed=7), prefetch,
                                 resegment=_resegmenter(src, tgt))
    plain = list(BatchIterator(src, tgt, BucketSampler(lens(src), lens(tgt), batch_size=12, seed=7), prefetch))
    first = list(make())
    assert [b.src.shape for b in first] == [b.src.shape for b in plain]       # the sampler's shapes and batches
    changed = kept = 0
    for b, p in zip(first, plain):
        assert (b.src_len >= p.src_len).all() and (b.tgt_len >= p.tgt_len).all()
        changed += int((b.tgt_len > p.tgt_len).sum())
        kept += int((b.src_len == p.src_len).sum())            # too long for the bucket: the best segmentation
    assert changed > 0 and kept > 0
    it = make()
    for _ in zip(range(5), it):
        pass
    state = it.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(first) - 5
    for a, b in zip(rest, first[5:]):
        assert (a.src == b.src).all() and (a.tgt_in == b.tgt_in).all() and (a.tgt_out == b.tgt_out).all()
    second = list(make())   # a new iterator: the same segmentations
    assert all((a.src == b.src).all() for a, b in zip(first, second))
    it = make()             # the same batch in another epoch: another segmentation
    item = it.sampler.epoch_batches(0)[0]
    in_epoch_0 = it._build(item, 0)
    it.sampler.set_epoch(1)
    assert (it._build(item, 0).tgt_out != in_epoch_0.tgt_out).any()
