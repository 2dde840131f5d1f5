#!/usr/bin/env python
"""Training throughput on real data: tokens/s of the trainer's update per device count and global batch.

    python scripts/benchmark_train.py --data-dir ../shared/data --devices 1,2 --batch-sizes 64 \\
        --json results/benchmark_train.json --plot results/benchmark_train.png

Every (device count, global batch) configuration runs in its own process: a fresh trainer (`nmt.train`'s
`create_trainer`: data, SentencePiece, hybridized model, optimizer) runs `--warmup` updates (default: one epoch, so
every batch shape has been seen), then `--repeats` timed windows of `--updates` updates (default: one epoch). The
device counts of one batch take turns window by window, so a change of load on the machine hits them alike;
figures are medians over the windows, and the comparison with one device is taken per round. CPU contexts
(`--devices N` without `--gpus`) share the same cores (each gets OMP_NUM_THREADS = cores / N): on CPU the sweep
reports the overhead of the multi-device path, not a speed-up. `--gpus 0,1,2,3` sweeps real GPUs.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "scripts"):   # run from a checkout without installing; scripts/conditions.py
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import conditions  # noqa: E402  (scripts/, beside this one)
from nmt.commands import number  # noqa: E402 (after the path)
from nmt.config import ConfigError  # noqa: E402


def _config(spec: dict):
    from nmt.config import Config, DataConfig, ModelConfig, OptimConfig, TrainConfig
    # no TensorBoard curves: the workers run updates through `train_step`, not `train`, which would close the writer
    return Config(data=DataConfig(**spec["data"]), model=ModelConfig(**spec["model"]), optim=OptimConfig(),
                  train=TrainConfig(**{"tensorboard": False, **spec["train"]}))


def _run_updates(trainer, n: int) -> dict:
    """`n` updates through `Trainer.train_step` (across epoch ends): wall time and what they saw."""
    import mxnet as mx
    seen = dict(updates=0, sentences=0, src_tokens=0, tgt_tokens=0)
    t0 = time.perf_counter()
    while seen["updates"] < n:
        for batch in trainer.data.batches:   # the rest of the current epoch
            trainer.train_step(batch)
            seen["updates"] += 1
            seen["sentences"] += batch.num_sentences
            seen["src_tokens"] += batch.num_src_tokens
            seen["tgt_tokens"] += batch.num_tgt_tokens
            if seen["updates"] >= n:
                break
    mx.nd.waitall()
    seen["seconds"] = time.perf_counter() - t0
    return seen


def train_worker(spec: dict, conn) -> None:
    """One configuration in its own process, driven over `conn`: "warmup" runs the warm-up updates, "window" one
    timed window (its figures are sent back), "finish" sends the configuration's details and ends."""
    if spec.get("omp_num_threads"):   # before MXNet (and its OpenMP runtime) is loaded in this fresh process
        os.environ["OMP_NUM_THREADS"] = str(spec["omp_num_threads"])
    from nmt.preflight import parameter_count
    from nmt.train import create_trainer
    with tempfile.TemporaryDirectory(prefix="nmt-bench-") as tmp:
        cfg = _config({**spec, "train": {**spec["train"], "model_dir": str(Path(tmp) / "model")}})
        trainer = create_trainer(cfg)
        sampler = trainer.data.sampler
        warm = {"updates": 0}
        while True:
            msg = conn.recv()
            if msg == "warmup":
                warm = _run_updates(trainer, spec["warmup"] or len(sampler))
                conn.send(warm)
            elif msg == "window":
                conn.send(_run_updates(trainer, spec["updates"] or len(sampler)))
            else:
                break
        conn.send({"devices": [str(c) for c in trainer.ctxs], "num_devices": len(trainer.ctxs),
                   "arch": cfg.model.arch, "parameters": parameter_count(trainer.net),
                   "src_vocab": trainer.data.src_tok.vocab_size, "tgt_vocab": trainer.data.tgt_tok.vocab_size,
                   "batch_size": cfg.data.batch_size, "accum_steps": cfg.train.accum_steps,
                   "batches_per_epoch": len(sampler), "bucket_shapes": sampler.bucket_shapes,
                   "real_positions": sampler.real_fraction, "warmup_updates": warm["updates"],
                   "omp_num_threads": os.environ.get("OMP_NUM_THREADS")})
    conn.close()


def run_worker(spec: dict, conn) -> None:
    """A benchmark process: `train_worker`, its error sent to the orchestrator, which stops with it (the traceback
    of an error other than bad input stays in this process). Stopped by SIGTERM, it exits through its `finally`
    blocks: its temporary directory (the model, tokenizers and encoded corpus) is removed."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        train_worker(spec, conn)
    except Exception as e:
        from nmt.commands import user_errors
        conn.send({"error": f"{type(e).__name__}: {e}"})
        if not isinstance(e, user_errors()):   # (a missing corpus: its one line, as the orchestrator says it)
            raise
    finally:   # (its directory gone: a stop ends it quietly, in MXNet's exit hook too)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_interleaved(specs: List[dict], after_round: Optional[Callable[[], None]] = None) -> List[dict]:
    """Every spec in its own process: warm-ups one after another, then `repeats` rounds in which each spec runs
    one timed window in turn (never two at once), and `after_round` (a reference measured in alternation with the
    windows, while the workers wait) after each. Returns each spec's details with its "windows"."""
    ctx = get_context("spawn")
    procs, conns, done = [], [], False
    try:
        for spec in specs:
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=run_worker, args=(spec, theirs), daemon=True)
            proc.start()
            procs.append(proc)
            conns.append(mine)

        def ask(i: int, msg: str) -> dict:
            conns[i].send(msg)
            reply = conns[i].recv()
            if "error" in reply:
                archs = [s["model"].get("arch", "lstm") for s in specs]   # (benchmark_arch's workers: one each)
                which = archs[i] if len(set(archs)) > 1 else f"{specs[i]['num_devices']} device(s)"
                raise SystemExit(f"error: benchmark worker for {which}: {reply['error']}")
            return reply

        for i in range(len(specs)):
            ask(i, "warmup")
        windows: List[list] = [[] for _ in specs]
        for _ in range(specs[0]["repeats"]):
            for i in range(len(specs)):
                windows[i].append(ask(i, "window"))
            if after_round:
                after_round()
        rows = [{**ask(i, "finish"), "windows": w} for i, w in enumerate(windows)]
        done = True
        return rows
    except (EOFError, OSError):
        raise SystemExit("error: a benchmark worker process died (see its traceback above)")
    finally:   # stopped (Ctrl-C, SIGTERM) or failed: the workers at once, not after a minute each of a window
        for proc in procs:
            proc.join(timeout=60 if done else 1)   # (a failed one is exiting already)
            if proc.is_alive():
                proc.terminate()   # (its handler removes its temporary directory as it exits)
                proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def summarize(res: dict, one: dict) -> dict:
    """A result row: medians over the windows, and time per update against `one` (one device, same batch), per
    round."""
    w = res["windows"]
    rate = {k: statistics.median(x[k] / x["seconds"] for x in w)
            for k in ("updates", "sentences", "src_tokens", "tgt_tokens")}
    spu = statistics.median(x["seconds"] / x["updates"] for x in w)
    ratios = [(x["seconds"] / x["updates"]) / (a["seconds"] / a["updates"]) for a, x in zip(one["windows"], w)]
    speedup = statistics.median(1.0 / r for r in ratios)   # each its own median: of an even number of rounds, the
    slower = statistics.median(ratios)                      # inverse of one median is not the other
    tok = rate["src_tokens"] + rate["tgt_tokens"]
    return {"num_devices": res["num_devices"], "batch_size": res["batch_size"], "accum_steps": res["accum_steps"],
            "omp_num_threads": res["omp_num_threads"], "ms_per_update": spu * 1e3,
            "epoch_s": spu * res["batches_per_epoch"],
            "updates_per_s": rate["updates"], "sent_per_s": rate["sentences"], "src_tok_per_s": rate["src_tokens"],
            "tgt_tok_per_s": rate["tgt_tokens"], "tok_per_s": tok, "speedup": speedup,
            "time_vs_1_device": slower, "efficiency": speedup / res["num_devices"],
            "bucket_shapes": res["bucket_shapes"],
            "real_positions": res["real_positions"], "raw": res}


def build_specs(args: argparse.Namespace, batch: int) -> List[dict]:
    """One spec per device count at global batch `batch`."""
    data = dict(recipe=args.recipe, data_dir=args.data_dir, src_lang=args.src, tgt_lang=args.tgt,
                vocab_size=args.vocab_size, batch_size=batch, bucketing=args.bucketing)
    model = dict(embed_size=args.embed_size, hidden_size=args.hidden_size, num_layers=args.num_layers,
                 attention=args.attention, dropout=args.dropout, tie_weights=args.tie_weights,
                 word_dropout=0.0, lexical_model=False)
    train = dict(progress=False, valid_every=0, max_epochs=10 ** 6, seed=1, patience=0, accum_steps=args.accum_steps,
                 amp=args.amp)
    gpu_ids = [x for x in (args.gpus or "").split(",") if x.strip()]
    cores = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    specs = []
    for n in args.devices:
        if gpu_ids and n > len(gpu_ids):
            raise ConfigError(f"--devices asks for {n} GPUs but --gpus lists {len(gpu_ids)}")
        gpus = ",".join(gpu_ids[:n]) + "," if gpu_ids else None
        specs.append({"data": data, "model": model, "num_devices": n, "warmup": args.warmup, "updates": args.updates,
                      "repeats": args.repeats, "omp_num_threads": None if gpus or n == 1 else max(1, cores // n),
                      "train": {**train, "gpus": gpus, "cpu_devices": 1 if gpus else n}})
    return specs


def plot(rows: List[dict], path: Path, title: str) -> None:
    """Time per update per (batch, device count); bars labelled with the speed-up against one device."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    batches = sorted({r["batch_size"] for r in rows})
    devices = sorted({r["num_devices"] for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(devices)
    for j, n in enumerate(devices):
        get = {r["batch_size"]: r for r in rows if r["num_devices"] == n}
        xs = [i + (j - (len(devices) - 1) / 2) * width for i in range(len(batches))]
        bars = ax.bar(xs, [get[b]["ms_per_update"] if b in get else 0 for b in batches], width, label=f"{n} device(s)")
        ax.bar_label(bars, labels=[f"x{get[b]['speedup']:.2f}" if b in get else "" for b in batches], fontsize=7)
    ax.set_xticks(range(len(batches)))
    ax.set_xticklabels([f"batch {b}" for b in batches])
    ax.set_ylabel("time per update (ms); labels: speed-up vs 1 device")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, format=path.suffix[1:].lower() or "png")   # (without one: no ".png" added)


def _int_list(text: str) -> List[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def add_data_args(p: argparse.ArgumentParser, vocab_size: int) -> None:
    """The data flags of a training benchmark (also scripts/benchmark_arch.py's)."""
    p.add_argument("--data-dir", help="offline mirror laid out like shared/data (else $NMT_DATA_DIR, cache)")
    p.add_argument("--recipe", default="tatoeba", help="dataset recipe (tatoeba or all)")
    p.add_argument("--src", default="ko")
    p.add_argument("--tgt", default="en")
    p.add_argument("--vocab-size", type=int, default=vocab_size, help="SentencePiece pieces per language")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)   # (benchmark_ab refuses its own flags after --, by name)
    add_data_args(p, vocab_size=8000)
    p.add_argument("--embed-size", type=int, default=256)
    p.add_argument("--hidden-size", type=int, default=256)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--attention", default="dot")
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--tie-weights", action="store_true", help="tie target embedding and output projection")
    p.add_argument("--devices", type=_int_list, default=[1, 2], help="device counts to sweep (default 1,2)")
    p.add_argument("--gpus", help="GPU ids to draw the devices from (e.g. 0,1,2,3); default: CPU contexts")
    p.add_argument("--amp", action="store_true", help="automatic mixed precision (GPUs only)")
    p.add_argument("--batch-sizes", type=_int_list, default=[64], help="global batches in sentences (default 64)")
    p.add_argument("--accum-steps", type=int, default=1, help="micro-batches per update")
    p.add_argument("--bucketing", default="padding", choices=("padding", "quantile"), help="bucketing scheme")
    p.add_argument("--warmup", type=number(int, 0), default=0, help="warm-up updates (0 = one epoch)")
    p.add_argument("--updates", type=number(int, 0), default=0, help="updates per timed window (0 = one epoch)")
    p.add_argument("--repeats", type=number(int, 1), default=3, help="timed windows per configuration (median "
                   "reported)")
    p.add_argument("--json", type=Path, help="write all figures here")
    p.add_argument("--plot", type=Path, help="write the time-per-update plot here, in the image format its suffix "
                   "names (.png, .svg, .pdf ...; PNG without one)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args, load0 = parse_args(argv), os.getloadavg()
    conditions.check_outputs(json=args.json, plot=args.plot)
    conditions.check_image("--plot", args.plot)
    if args.amp and not args.gpus:
        raise ConfigError("--amp needs --gpus: automatic mixed precision is a GPU feature (float16 kernels)")
    if 1 not in args.devices:
        raise ConfigError("--devices must include 1: every count is compared with one device")
    rows = []
    for batch in args.batch_sizes:
        results = run_interleaved(build_specs(args, batch))
        one = next(r for r in results if r["num_devices"] == 1)
        for res in results:
            row = summarize(res, one)
            rows.append(row)
            print(f"devices {row['num_devices']} batch {batch:4d}: {row['ms_per_update']:7.1f} ms/update  "
                  f"{row['epoch_s']:6.1f} s/epoch  {row['sent_per_s']:6.0f} sent/s  "
                  f"{row['src_tok_per_s']:6.0f}+{row['tgt_tok_per_s']:.0f} tok/s  time/update "
                  f"x{row['time_vs_1_device']:.2f} of 1 device (speedup {row['speedup']:.2f}, efficiency "
                  f"{row['efficiency']:.2f})")
    report: Dict[str, object] = {"machine": conditions.machine(load0), "train": rows}
    if args.json:
        from nmt.atomic import atomic_write_text
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    if args.plot:
        m = report["machine"]
        plot(rows, args.plot, f"{args.recipe} {args.src}-{args.tgt}, embed/hidden {args.embed_size}/"
                              f"{args.hidden_size}, {args.num_layers} layers; {m['cpu']}, {m['cores']} cores")
    return 0


if __name__ == "__main__":
    from nmt.commands import run_cli
    sys.exit(run_cli(main))   # bad input: one line, exit 2
