#!/usr/bin/env python
"""Beam-search decoding speed: nmt.search (MXNet operators) against gluonnlp 0.10's BeamSearchSampler.

    OMP_NUM_THREADS=2 python scripts/benchmark_decode.py --model-dir models/tatoeba-ko-en --data-dir ../shared/data

On one model directory and test set (--src-file, else the first test set of the model's recipe), both searches
decode the same length-sorted batches with the same beam, length penalty (gluonnlp's `BeamSearchScorer` with the
same alpha and K = 5) and maximum length. The sampler runs twice: driving the model through its `hybrid_step`
(the model interface's step as one planned graph, as our search does: the strongest baseline) and through its
imperative `step` (a hybridized decoder block per call, as a gluonnlp user would pass it).
The searches take turns for --rounds timed rounds after one warm-up round, in this one process, so a change of load
hits all alike; rates are sentences/s from the median round, the speed-up is the median of the per-round ratios.
Whether each sentence's best hypothesis is the same in both is counted. With --other-model-dir (say, a Transformer
beside an LSTM), that model's beam search takes its turn in the same rounds on the same sentences. Writes --output
(replacing it).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "scripts"):   # run from a checkout without installing; scripts/conditions.py
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import conditions  # noqa: E402  (scripts/, beside this one)
from nmt.config import ConfigError  # noqa: E402

Batch = tuple   # (src, src_len, max_len)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True, type=Path)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch", type=int, default=64, help="sentences per batch")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds of each search (after one warm-up)")
    p.add_argument("--checkpoint", default="best", help="best, latest, avg or a step number (default: best)")
    p.add_argument("--src-file", help="source sentences (default: the first test set of the model's recipe)")
    p.add_argument("--data-dir", help="offline mirror for the recipe's test set (else the model's, $NMT_DATA_DIR)")
    p.add_argument("--sentences", type=int, default=0, help="decode only the first N sentences (0 = all)")
    p.add_argument("--other-model-dir", type=Path,
                   help="a second model of the same source language (e.g. the other architecture): decoded by "
                        "nmt.search in the same rounds, on the same sentences, and reported beside the first")
    p.add_argument("--output", type=Path, default=REPO / "results" / "benchmark_decode.json",
                   help="the JSON of figures (default: results/benchmark_decode.json, which docs/performance.md cites: "
                        "give another for a trial run)")
    return p.parse_args(argv)


def make_batches(tr, lines: Sequence[str], batch: int) -> List[Batch]:
    """Length-sorted batches of the non-empty lines, each with the decoding config's maximum output length."""
    import mxnet as mx
    from nmt.batching import pad_sources
    from nmt.search import length_limits   # (as nmt-translate's search limits a sentence of the batch's length)
    ids = tr.source_ids(lines)
    order = sorted((i for i, x in enumerate(ids) if x), key=lambda i: len(ids[i]))
    out = []
    for s in range(0, len(order), batch):
        rows = [ids[i] for i in order[s:s + batch]]
        src, src_len = pad_sources(rows, max(len(r) for r in rows) + 1)
        max_len = int(length_limits([int(src_len.max())], tr.decode.max_len_a, tr.decode.max_len_b)[0])
        out.append((mx.nd.array(src, ctx=tr.ctx), mx.nd.array(src_len, ctx=tr.ctx), max_len))
    return out


def ours(model, batches: List[Batch], beam: int, alpha: float) -> List[List[int]]:
    """The best hypothesis of every sentence by `nmt.search.beam_search`."""
    from nmt.search import beam_search
    return [hyps[0][0] for src, src_len, m in batches for hyps in beam_search(model, src, src_len, beam, m, alpha)]


def sampler_step(model, template, planned: bool = True) -> Callable:
    """A gluonnlp `BeamSearchSampler` decoder over the model's step: its states are the arrays of a state shaped
    like `template`, one hypothesis per sentence, since the sampler repeats and reorders every one of them by rows,
    encoder memory included. `planned`: the step as one planned graph (`hybrid_step`, the step our search runs: the
    strongest baseline), else the model's imperative `step` (its decoder block one cached graph per call, as a
    gluonnlp user would pass a hybridized decoder)."""
    run = model.hybrid_step if planned else model.step

    def step(tokens, states):
        log_probs, state, _ = run(tokens.astype("float32"), template.with_arrays(states))
        return log_probs, state.arrays()
    return step


def gluonnlp_sampler(model, batches: List[Batch], beam: int, alpha: float, planned: bool = True) -> List[List[int]]:
    """The best hypothesis of every sentence by gluonnlp 0.10's BeamSearchSampler and BeamSearchScorer."""
    import mxnet as mx
    from gluonnlp.model import BeamSearchSampler, BeamSearchScorer
    from nmt.tokenizer import BOS_ID, EOS_ID
    out = []
    for src, src_len, m in batches:
        state = model.init_state(model.encode(src, src_len))
        scorer = BeamSearchScorer(alpha=alpha, K=5.0, from_logits=False)
        sampler = BeamSearchSampler(beam, sampler_step(model, state, planned), EOS_ID, scorer, max_length=m)
        samples, _, valid = sampler(mx.nd.full((src.shape[0],), BOS_ID, ctx=src.context), state.arrays())
        samples, valid = samples.asnumpy(), valid.asnumpy()
        for r in range(src.shape[0]):
            seq = [int(x) for x in samples[r, 0, 1:int(valid[r, 0])]]
            out.append(seq[:-1] if seq and seq[-1] == EOS_ID else seq)
    return out


def gluonnlp_sampler_on_step(model, batches: List[Batch], beam: int, alpha: float) -> List[List[int]]:
    """`gluonnlp_sampler` over the model's imperative `step`."""
    return gluonnlp_sampler(model, batches, beam, alpha, planned=False)


def _speedup(seconds: Dict[str, List[float]], baseline: str) -> float:
    """The median over rounds of the baseline's time over our search's."""
    return statistics.median(g / o for o, g in zip(seconds["beam_search"], seconds[baseline]))


def run(args: argparse.Namespace) -> dict:
    """Warm-up, then alternating timed rounds; the report written to --output."""
    load0 = os.getloadavg()
    import mxnet as mx
    from nmt.translate import Translator
    if args.sentences < 0:
        raise ConfigError(f"--sentences must be >= 0 (0 = all), got {args.sentences}")
    from nmt.corpus import CorpusError
    tr = Translator.from_dir(args.model_dir, which=args.checkpoint)   # (its errors: one line, exit 2; run_cli)
    from nmt.scoring import first_test_sources
    try:
        name, lines = first_test_sources(tr.config, args.data_dir, args.src_file)
    except (ConfigError, CorpusError, OSError) as e:
        raise ConfigError(f"no sentences: {e}") from None
    lines = lines[:args.sentences] if args.sentences else lines
    batches = make_batches(tr, lines, args.batch)
    alpha, n = tr.decode.length_penalty_alpha, sum(b[0].shape[0] for b in batches)
    runs = {"beam_search": (ours, tr.net, batches),
            "gluonnlp_beam_search_sampler": (gluonnlp_sampler, tr.net, batches),
            "gluonnlp_sampler_on_step": (gluonnlp_sampler_on_step, tr.net, batches)}
    other = None
    if args.other_model_dir:
        other = Translator.from_dir(args.other_model_dir, which=args.checkpoint)
        if other.src_lang != tr.src_lang:
            raise ConfigError(f"--other-model-dir translates from {other.src_lang}, --model-dir from {tr.src_lang}")
        runs["other_beam_search"] = (ours, other.net, make_batches(other, lines, args.batch))
    outputs = {k: fn(net, b, args.beam, alpha) for k, (fn, net, b) in runs.items()}   # warm-up: every shape
    seconds: Dict[str, List[float]] = {k: [] for k in runs}
    for _ in range(args.rounds):
        for k, (fn, net, b) in runs.items():
            t0 = time.perf_counter()
            fn(net, b, args.beam, alpha)
            mx.nd.waitall()
            seconds[k].append(time.perf_counter() - t0)
    same = sum(a == b for a, b in zip(outputs["beam_search"], outputs["gluonnlp_beam_search_sampler"]))
    report = {"machine": conditions.machine(load0), "model_dir": str(args.model_dir), "checkpoint": args.checkpoint,
              "model": dict(vars(tr.config.model)), "test_set": name, "sentences": n, "beam": args.beam,
              "batch": args.batch, "alpha": alpha, "rounds": args.rounds,
              **{k: {"sent_per_s": n / statistics.median(v), "seconds": v} for k, v in seconds.items()},
              "speedup_vs_gluonnlp": _speedup(seconds, "gluonnlp_beam_search_sampler"),
              "speedup_vs_gluonnlp_on_step": _speedup(seconds, "gluonnlp_sampler_on_step"),
              "identical_outputs": same, "differing_outputs": n - same,
              "samplers_agree": sum(a == b for a, b in zip(outputs["gluonnlp_beam_search_sampler"],
                                                           outputs["gluonnlp_sampler_on_step"]))}
    if other is not None:   # per round, the first model's time over the other's: > 1 when the other is faster
        report["other_beam_search"].update(
            model_dir=str(args.other_model_dir), model=dict(vars(other.config.model)),
            x_vs_first=statistics.median(a / b for a, b in zip(seconds["beam_search"], seconds["other_beam_search"])))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


def main(argv=None) -> int:
    args = parse_args(argv)
    conditions.check_outputs([args.model_dir, args.other_model_dir], {"--src-file": args.src_file}, output=args.output)
    if args.rounds < 1 or args.beam < 1 or args.batch < 1:
        raise ConfigError("--rounds, --beam and --batch must be >= 1")
    if args.src_file and args.data_dir:   # (it was ignored without a word)
        raise ConfigError(f"--data-dir {args.data_dir} is where the model's test set is read; --src-file "
                          f"{args.src_file} is read where it is: drop it")
    r = run(args)
    print(f"{r['test_set']}: {r['sentences']} sentences, beam {r['beam']}, batch {r['batch']}: nmt.search "
          f"{r['beam_search']['sent_per_s']:.1f} sent/s, gluonnlp BeamSearchSampler "
          f"{r['gluonnlp_beam_search_sampler']['sent_per_s']:.1f} sent/s, {r['speedup_vs_gluonnlp']:.2f}x "
          f"(on the imperative step {r['gluonnlp_sampler_on_step']['sent_per_s']:.1f} sent/s, "
          f"{r['speedup_vs_gluonnlp_on_step']:.2f}x); "
          f"{r['differing_outputs']} of {r['sentences']} best hypotheses differ; written to {args.output}")
    if "other_beam_search" in r:
        o = r["other_beam_search"]
        print(f"{o['model_dir']} ({o['model']['arch']}): nmt.search {o['sent_per_s']:.1f} sent/s, "
              f"{o['x_vs_first']:.2f}x the first model's")
    return 0


if __name__ == "__main__":
    from nmt.commands import run_cli
    sys.exit(run_cli(main))   # bad input: one line, exit 2
