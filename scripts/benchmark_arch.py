#!/usr/bin/env python
"""Training speed of the two architectures side by side: tokens/s of the Transformer and of the LSTM at about equal
parameter count, and their useful FLOP/s against the cores' sgemm rate.

    OMP_NUM_THREADS=1 python scripts/benchmark_arch.py --data-dir ../shared/data --encoder-layers 3 \
        --decoder-layers 3 --json results/benchmark_arch.json

(3 + 3 layers: the Transformer's default is 2 + 2, 3.7 M parameters against the LSTM's 5.0 M.)

Each architecture (its defaults, `Config.for_arch`, with the sizes given here; dropout as in those defaults) trains
in its own process, scripts/benchmark_train.py's workers: `--warmup` updates (default: one epoch, every batch shape
seen), then `--repeats` timed windows of `--updates` updates (default: one epoch), the two architectures taking turns
window by window so that a change of load hits both alike. Rates are medians over the windows; the Transformer/LSTM
ratio is the median of the per-round ratios. Useful FLOP/s = source tokens/s x training FLOPs per source token +
target tokens/s x those per target token (each architecture's `count_flops_per_token` at the measured mean sentence
lengths), against the rate of `nd.dot` on `--sgemm-size`^2 float32 matrices in this process (same threads), taken
after each round of windows (the fastest of 5 products), so that a change of load hits both alike: the fraction of
sgemm is the median of the rounds' ratios, and one above 100% (the sgemm rate measured under load that the windows
did not meet, or with an --sgemm-size too small to reach it) is warned about. Decoding speed (beam 4, sentences/s)
of either architecture: scripts/benchmark_decode.py.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "scripts"):   # run from a checkout without installing; its workers import benchmark_train
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import benchmark_train  # noqa: E402
import conditions  # noqa: E402
from nmt.config import ConfigError  # noqa: E402

ARCHS = ("lstm", "transformer")
SIZE_FLAGS = {"lstm": ("embed_size", "hidden_size", "num_layers"),
              "transformer": ("model_size", "ff_size", "heads", "encoder_layers", "decoder_layers")}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    benchmark_train.add_data_args(p, vocab_size=2000)   # the training default
    p.add_argument("--batch-size", type=int, default=32, help="global batch in sentences (the training default)")
    for arch, fields in SIZE_FLAGS.items():
        for field in fields:
            p.add_argument("--" + field.replace("_", "-"), type=int, help=f"{arch} size (default: the {arch}'s)")
    p.add_argument("--warmup", type=int, default=0, help="warm-up updates (0 = one epoch)")
    p.add_argument("--updates", type=int, default=0, help="updates per timed window (0 = one epoch)")
    p.add_argument("--repeats", type=int, default=3, help="timed windows per architecture (median reported)")
    p.add_argument("--sgemm-size", type=int, default=2048, help="matrix size of the sgemm rate")
    p.add_argument("--json", type=Path, help="write all figures here")
    return p.parse_args(argv)


def build_specs(args: argparse.Namespace) -> List[dict]:
    """One benchmark_train worker spec per architecture: its default model with the sizes given."""
    from nmt.config import Config
    data = dict(recipe=args.recipe, data_dir=args.data_dir, src_lang=args.src, tgt_lang=args.tgt,
                vocab_size=args.vocab_size, batch_size=args.batch_size)
    train = dict(progress=False, valid_every=0, max_epochs=10 ** 6, seed=1, patience=0)
    specs = []
    for arch in ARCHS:
        model = dict(vars(Config.for_arch(arch).model))
        model.update({f: getattr(args, f) for f in SIZE_FLAGS[arch] if getattr(args, f) is not None})
        specs.append({"data": data, "model": model, "num_devices": 1, "warmup": args.warmup,
                      "updates": args.updates, "repeats": args.repeats, "omp_num_threads": None, "train": train})
    return specs


def sgemm_gflops(size: int, repeats: int = 5) -> float:
    """GFLOP/s of `nd.dot` on two (size, size) float32 matrices: the fastest of `repeats` timed products (the rate
    of the cores; a product that other load slowed says less about them)."""
    import mxnet as mx
    a, b = mx.nd.random.uniform(shape=(size, size)), mx.nd.random.uniform(shape=(size, size))
    mx.nd.dot(a, b).wait_to_read()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        mx.nd.dot(a, b).wait_to_read()
        times.append(time.perf_counter() - t0)
    return 2.0 * size ** 3 / min(times) / 1e9


def flops_per_token(res: dict, model: dict, src_len: float, tgt_len: float) -> Dict[str, float]:
    """The architecture's training FLOPs per source and target token at the measured mean lengths."""
    from nmt.config import ModelConfig
    from nmt.models import lstm, transformer
    cfg = ModelConfig(**model)
    if cfg.arch == "transformer":
        return transformer.count_flops_per_token(cfg, res["src_vocab"], res["tgt_vocab"], src_len, tgt_len)
    return lstm.count_flops_per_token(cfg, res["src_vocab"], res["tgt_vocab"], src_len)


def summarize(res: dict, model: dict, lstm: dict, sgemm: List[float]) -> dict:
    """A result row: medians over the windows, useful FLOP/s, and the per-round ratios of tokens/s to the LSTM's and
    of useful FLOP/s to `sgemm`, the sgemm rate (GFLOP/s) measured after each round."""
    w = res["windows"]
    rate = {k: statistics.median(x[k] / x["seconds"] for x in w)
            for k in ("updates", "sentences", "src_tokens", "tgt_tokens")}
    src_len = sum(x["src_tokens"] for x in w) / sum(x["sentences"] for x in w)
    tgt_len = sum(x["tgt_tokens"] for x in w) / sum(x["sentences"] for x in w)
    flops = flops_per_token(res, model, src_len, tgt_len)
    def useful_of(src_tokens: float, tgt_tokens: float) -> float:   # training FLOPs of so many tokens
        return src_tokens * flops["src_train_flops"] + tgt_tokens * flops["tgt_train_flops"]
    useful = useful_of(rate["src_tokens"], rate["tgt_tokens"])
    per_round = [useful_of(x["src_tokens"], x["tgt_tokens"]) / x["seconds"] / 1e9 / rate_r
                 for x, rate_r in zip(w, sgemm, strict=True)]
    tok = [(x["src_tokens"] + x["tgt_tokens"]) / x["seconds"] for x in w]
    lstm_tok = [(x["src_tokens"] + x["tgt_tokens"]) / x["seconds"] for x in lstm["windows"]]
    return {"arch": res["arch"], "parameters": res["parameters"], "batch_size": res["batch_size"],
            "ms_per_update": 1e3 / rate["updates"], "sent_per_s": rate["sentences"],
            "src_tok_per_s": rate["src_tokens"], "tgt_tok_per_s": rate["tgt_tokens"],
            "tok_per_s": statistics.median(tok), "x_lstm_tok_per_s": statistics.median(
                a / b for a, b in zip(tok, lstm_tok)), "flops_per_token": flops, "useful_gflops": useful / 1e9,
            "sgemm_gflops": statistics.median(sgemm), "sgemm_gflops_per_round": sgemm,
            "fraction_of_sgemm": statistics.median(per_round), "model": model, "raw": res}


def above_sgemm(row: dict) -> str:
    """A warning when the row's useful FLOP/s exceed the sgemm rate, which a model cannot ("" if not)."""
    if row["fraction_of_sgemm"] <= 1:
        return ""
    rates = ", ".join(f"{g:.1f}" for g in row["sgemm_gflops_per_round"])
    return (f"warning: {row['arch']}: {100 * row['fraction_of_sgemm']:.0f}% of sgemm is more than a model can reach: "
            f"the sgemm rate ({rates} GFLOP/s after the rounds) was measured under load that the training windows "
            "did not meet (rerun on an otherwise idle machine), or with an --sgemm-size too small to reach it "
            "(rerun with a larger one)")


def main(argv=None) -> int:
    args, load0 = parse_args(argv), os.getloadavg()
    conditions.check_outputs(json=args.json)
    if min(args.repeats, args.batch_size, args.sgemm_size) < 1 or min(args.warmup, args.updates) < 0:
        raise ConfigError("--repeats, --batch-size and --sgemm-size must be >= 1, --warmup and --updates >= 0")
    specs = build_specs(args)
    sgemm: List[float] = []   # after each round of windows: a change of load hits the windows and it alike
    results = benchmark_train.run_interleaved(specs, lambda: sgemm.append(sgemm_gflops(args.sgemm_size)))
    rows = [summarize(res, spec["model"], results[0], sgemm) for res, spec in zip(results, specs)]
    for r in rows:
        print(f"{r['arch']:11s} {r['parameters'] / 1e6:5.2f}M parameters, batch {r['batch_size']}: "
              f"{r['ms_per_update']:7.1f} ms/update  {r['src_tok_per_s']:6.0f}+{r['tgt_tok_per_s']:.0f} tok/s  "
              f"x{r['x_lstm_tok_per_s']:.2f} the LSTM's tokens/s  {r['useful_gflops']:6.2f} useful GFLOP/s, "
              f"{100 * r['fraction_of_sgemm']:.1f}% of sgemm (the median of the rounds' ratios to its rate, median "
              f"{r['sgemm_gflops']:.1f} GFLOP/s)")
        if warning := above_sgemm(r):
            print(warning, file=sys.stderr)
    if args.json:
        from nmt.atomic import atomic_write_text
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"machine": conditions.machine(load0), "train": rows}
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    from nmt.commands import run_cli
    sys.exit(run_cli(main))   # bad input: one line, exit 2
