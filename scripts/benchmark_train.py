#!/usr/bin/env python
"""Training and decoding throughput on real data, against the machine's own matrix-multiply limit.

    OMP_NUM_THREADS=2 python scripts/benchmark_train.py --data-dir ../shared/data \\
        --devices 1,2,4 --batch-sizes 60,120,240 --json results/benchmark_train.json --plot results/benchmark_train.png

For every (device count, global batch) pair a fresh `nmt.train.Trainer` (the real setup: data, SentencePiece,
hybridized model, DataParallel, optimizer) in its own process runs `--warmup` updates (default: one epoch, so
every batch shape has been seen), then `--repeats` timed windows of `--updates` updates (default: one epoch
each), the device counts of one batch size taking turns window by window (so a change of load on a shared machine
hits them alike); figures are medians over the windows: time per update and per epoch, updates/s, sentences/s,
source and target tokens/s (real tokens, padding excluded), and, per round, time per update against one device
at the same global batch (speedup, scaling efficiency). CPU contexts
(`--cpu-devices N` in training) share the same cores, so on CPU the device sweep measures the overhead of the
split/aggregate machinery (N contexts get OMP_NUM_THREADS = cores / N each, one context all of them);
`--side-by-side` adds, for each N > 1, N separate one-context processes training 1/N of the global batch each
at once, with 1/N of the cores each: the same sharing of the cores (and of memory bandwidth and cache) without the
machinery, so that the N-context row's time against it is the machinery's own cost. `--gpus 0,1,2,3` sweeps real
GPUs (`--amp` adds mixed precision there).

The same run measures the cores' sgemm rate through MXNet (`nd.dot`, and oneDNN's FullyConnected, on 2048^3
float32 products) and reports the training step's useful FLOP rate (nmt.models.lstm.count_flops_per_token x real
tokens/s) as a fraction of it; `--decode` times batched beam search against gluonnlp's BeamSearchSampler on the
recipe's first test set (same model, beam, batch, maximum length; identical output is checked), plus the
Translator's beam and greedy rates, on one device and on each count of `--decode-devices` (a process per count,
taking turns round by round; CPU contexts get OMP_NUM_THREADS / N each); `--memory-updates N` trains a tiny model N updates and reports resident
memory at 100 updates and at N. Every measurement runs in its own fresh process, so peak-memory figures are
its own. Run it on an otherwise idle machine: the load average before and after is recorded.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:   # run from a checkout without installing
    sys.path.insert(0, str(REPO))

GNMT_REFERENCE_TOK_PER_S = 2150.0   # GluonNLP 0.10 GNMT recipe, same setting, measured on the 2-core reference machine
GNMT_REFERENCE_DECODE = {"beam4": 83.0, "greedy": 213.0}   # its translator, sentences/s, same test set and machine


# -- helpers shared by the workers ------------------------------------------------------------------------------
def _proc_status(field: str) -> float:
    """VmRSS / VmHWM of this process in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _reset_peak_rss() -> bool:
    try:   # Linux >= 4.0: writing 5 resets VmHWM to the current RSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _loadavg() -> List[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def _config(spec: dict):
    from nmt.config import Config, DataConfig, ModelConfig, OptimConfig, TrainConfig
    d = spec["data"]
    return Config(data=DataConfig(**d), model=ModelConfig(**spec["model"]), optim=OptimConfig(**spec.get("optim", {})),
                  train=TrainConfig(**spec["train"]))


def _new_trainer(spec: dict, model_dir: Path):
    """A fresh Trainer (data, SentencePiece models, model, optimizer) in `model_dir`."""
    from nmt.train import Trainer
    spec = json.loads(json.dumps(spec))
    spec["train"]["model_dir"] = str(model_dir)
    return Trainer(_config(spec))


def _run_updates(trainer, n: int) -> dict:
    """`n` updates through Trainer.train_step (across epoch ends); wall time and what was seen."""
    import mxnet as mx
    seen = dict(updates=0, sentences=0, src_tokens=0, tgt_tokens=0)
    t0 = time.perf_counter()
    while seen["updates"] < n:
        for batch in trainer.batches:   # the rest of the current epoch
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


# -- workers (each in a fresh process) --------------------------------------------------------------------------
def peak_worker(size: int = 2048, repeats: int = 7) -> dict:
    """GFLOP/s of float32 (size x size) @ (size x size) through nd.dot (MXNet's BLAS) and FullyConnected (oneDNN)."""
    import mxnet as mx
    a = mx.nd.random.uniform(shape=(size, size))
    b = mx.nd.random.uniform(shape=(size, size))

    def rate(fn) -> float:
        fn().wait_to_read()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn().wait_to_read()
            times.append(time.perf_counter() - t0)
        return 2.0 * size ** 3 / statistics.median(times) / 1e9
    return {"size": size, "dot_gflops": rate(lambda: mx.nd.dot(a, b)),
            "fc_gflops": rate(lambda: mx.nd.FullyConnected(a, b, no_bias=True, num_hidden=size))}


def run_worker(body, spec: dict, conn) -> None:
    """A benchmark process: `body(spec, conn)` (`train_worker`, `decode_worker`), its error sent to the
    orchestrator, which stops with it (the traceback stays in this process)."""
    try:
        body(spec, conn)
    except Exception as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})
        raise


def train_worker(spec: dict, conn) -> None:
    """One (devices, batch) configuration in its own process, driven over `conn`: "warmup" runs the warm-up
    updates, "window" one timed window (its figures are sent back), "finish" sends the configuration's details
    and ends. The orchestrator interleaves the windows of every device count, so a change of load on the
    machine hits them alike."""
    if spec.get("omp_num_threads"):   # before MXNet (and its OpenMP runtime) is loaded in this fresh process
        os.environ["OMP_NUM_THREADS"] = str(spec["omp_num_threads"])
    import mxnet as mx
    from nmt.models.lstm import count_flops_per_token
    with tempfile.TemporaryDirectory(prefix="nmt-bench-") as tmp:
        trainer = _new_trainer(spec, Path(tmp) / "model")
        per_epoch = len(trainer.sampler)
        _reset_peak_rss()
        warm = {"updates": 0}
        while True:
            msg = conn.recv()
            if msg == "warmup":
                warm = _run_updates(trainer, spec["warmup"] or per_epoch)
                conn.send(warm)
            elif msg == "window":
                conn.send(_run_updates(trainer, spec["updates"] or per_epoch))
            else:
                break
        src_lens = [len(s) + 1 for s in trainer.data.train_src]
        flops = count_flops_per_token(trainer.cfg.model, trainer.src_tok.vocab_size, trainer.tgt_tok.vocab_size,
                                      avg_src_len=sum(src_lens) / len(src_lens))
        res = {"devices": [str(c) for c in trainer.ctxs], "num_devices": len(trainer.ctxs),
               "accum_steps": trainer.cfg.train.accum_steps,
               "batch_size": trainer.cfg.data.batch_size, "batches_per_epoch": per_epoch,
               "bucketing": trainer.sampler.bucketing, "bucket_shapes": trainer.sampler.bucket_shapes,
               "bucket_sizes": trainer.sampler.bucket_sizes, "real_positions": trainer.sampler.real_fraction,
               "src_vocab": trainer.src_tok.vocab_size, "tgt_vocab": trainer.tgt_tok.vocab_size,
               "warmup_updates": warm["updates"], "flops_per_token": flops, "peak_rss_mib": _proc_status("VmHWM"),
               "threads": {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
                           "MXNET_CPU_WORKER_NTHREADS": os.environ.get("MXNET_CPU_WORKER_NTHREADS")}}
        mx.nd.waitall()
    conn.send(res)
    conn.close()


def run_interleaved(specs: List[dict], worker=None) -> List[dict]:
    """Every spec in its own process running `worker` (default `train_worker`): warm-ups one after another, then
    `repeats` rounds in which each spec runs one timed window in turn (never two at once). A spec with
    "side_by_side": N runs in N processes at once, which warm up and time their windows together (the window:
    the slowest process's seconds, the processes' sentences and tokens summed). Returns each spec's details
    with its "windows"."""
    ctx = get_context("spawn")
    procs, groups = [], []   # groups[i]: the connections to spec i's processes
    try:
        for spec in specs:
            conns = []
            for _ in range(spec.get("side_by_side", 1)):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=run_worker, args=(worker or train_worker, spec, theirs), daemon=True)
                proc.start()
                procs.append(proc)
                conns.append(mine)
            groups.append(conns)

        def ask(i: int, msg: str) -> List[dict]:
            for conn in groups[i]:   # all of a group's processes start before any is waited for
                conn.send(msg)
            replies = [conn.recv() for conn in groups[i]]
            for reply in replies:
                if "error" in reply:
                    n = specs[i]["devices"] if "devices" in specs[i] else specs[i]["train"]["cpu_devices"]
                    raise SystemExit(f"error: benchmark worker for {n} device(s): {reply['error']}")
            return replies

        for i in range(len(specs)):
            ask(i, "warmup")
        windows: List[list] = [[] for _ in specs]
        for _ in range(specs[0]["repeats"]):
            for i in range(len(specs)):
                windows[i].append(_together(ask(i, "window")))
        return [{**ask(i, "finish")[0], "windows": w} for i, w in enumerate(windows)]
    except (EOFError, OSError):
        raise SystemExit("error: a benchmark worker process died (see its traceback above)")
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.terminate()


def _together(windows: List[dict]) -> dict:
    """One window of processes that ran side by side: as many updates as each ran (the same data and batch),
    the slowest one's seconds, sentences and tokens summed (each process's own window under "processes")."""
    if len(windows) == 1:
        return windows[0]
    out = {"updates": min(w["updates"] for w in windows), "seconds": max(w["seconds"] for w in windows)}
    out.update({k: sum(w[k] for w in windows) for k in ("sentences", "src_tokens", "tgt_tokens")})
    return {**out, "processes": windows}


def native_ab_worker(spec: dict) -> dict:
    """The training step with and without nmt.native's training kernels (the gradient sum and norm of
    `DataParallel._native`, and `NativeAdam`'s update), in one process, alternating rounds over the same
    `ab_batches` batches after the warm-up: both see the same shapes and the same load. Times per update in ms
    (medians over rounds) and the median per-round ratio."""
    if spec.get("omp_num_threads"):
        os.environ["OMP_NUM_THREADS"] = str(spec["omp_num_threads"])
    import mxnet as mx
    with tempfile.TemporaryDirectory(prefix="nmt-bench-ab-") as tmp:
        trainer = _new_trainer(spec, Path(tmp) / "model")
        if not trainer.dp._native:
            return {"native_ops": "not used (see the log)"}
        _run_updates(trainer, spec["warmup"] or len(trainer.sampler))
        batches = []
        while len(batches) < spec["ab_batches"]:
            batches += list(trainer.batches)
        batches = batches[:spec["ab_batches"]]
        ms = {True: [], False: []}
        for r in range(2 * spec["repeats"]):
            on = trainer.dp._native = r % 2 == 0
            t0 = time.perf_counter()
            for batch in batches:
                trainer.train_step(batch)
            mx.nd.waitall()
            ms[on].append(1000 * (time.perf_counter() - t0) / len(batches))
    return {"devices": spec["train"]["cpu_devices"], "batch_size": spec["data"]["batch_size"],
            "batches": len(batches), "rounds": spec["repeats"],
            "native_ms_per_update": statistics.median(ms[True]),
            "mxnet_ops_ms_per_update": statistics.median(ms[False]),
            "speedup": statistics.median(b / a for a, b in zip(ms[True], ms[False]))}


def memory_worker(spec: dict) -> dict:
    """Resident memory over a long run of a tiny model, every 100 updates."""
    with tempfile.TemporaryDirectory(prefix="nmt-bench-mem-") as tmp:
        trainer = _new_trainer(spec, Path(tmp) / "model")
        rss = {}
        for mark in range(100, spec["updates"] + 1, 100):
            _run_updates(trainer, 100)
            rss[mark] = round(_proc_status("VmRSS"), 1)
    last, values = max(rss), list(rss.values())
    half = len(values) // 2
    # Medians, as well as the endpoints: the pool and allocator make RSS jump up and back by tens of MiB.
    return {"updates": spec["updates"], "rss_mib": rss, "model": spec["model"], "rss_at_100": rss[100],
            "rss_at_end": rss[last], "median_first_half": statistics.median(values[:max(half, 1)]),
            "median_second_half": statistics.median(values[half:])}


def decode_worker(spec: dict, conn) -> None:
    """Decoding speed on `spec["devices"]` CPU contexts (or the GPUs of `spec["gpus"]`), driven over `conn` like
    `train_worker`: "warmup" decodes once with every method (every batch shape once), "window" once more, timed
    (seconds per method sent back), "finish" sends the details. One device: our batched beam search, gluonnlp's
    BeamSearchSampler on the same batches and model, and the Translator (beam and greedy); several: the Translator,
    its batches shared out among the devices."""
    if spec.get("omp_num_threads"):   # before MXNet (and its OpenMP runtime) is loaded in this fresh process
        os.environ["OMP_NUM_THREADS"] = str(spec["omp_num_threads"])
    import mxnet as mx
    from nmt.parallel import parse_devices
    from nmt.scoring import recipe_tests
    from nmt.translate import Translator
    _reset_peak_rss()
    gpus = spec.get("gpus")
    ctxs = parse_devices(",".join(gpus.split(",")[:spec["devices"]]) + "," if gpus else None, spec["devices"],
                         spare_cpu0=True)   # as translate.py / evaluate.py
    tr = Translator.from_dir(spec["model_dir"], which=spec["checkpoint"], ctx=ctxs)
    test_name, test = next(iter(recipe_tests(tr.config, spec["data"].get("data_dir")).items()))
    lines = test.src[:spec["sentences"]] if spec["sentences"] else test.src
    K = spec["beam"]
    tr.decode.batch_size = spec["batch"]
    methods = {"translator_beam": lambda: tr.translate(lines, beam_size=K),
               "translator_greedy": lambda: tr.translate(lines, beam_size=1)}
    if len(ctxs) == 1:
        methods = {**_search_methods(tr, lines, K, spec["batch"]), **methods}
    outputs: Dict[str, list] = {}
    while True:
        msg = conn.recv()
        if msg == "warmup":
            outputs = {name: fn() for name, fn in methods.items()}
            conn.send({})
        elif msg == "window":
            times = {}
            for name, fn in methods.items():
                t0 = time.perf_counter()
                fn()
                times[name] = time.perf_counter() - t0
            conn.send(times)
        else:
            break
    mx.nd.waitall()
    conn.send({"test_set": test_name, "sentences": len(lines), "beam": K, "batch": spec["batch"],
               "devices": [str(c) for c in ctxs], "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
               "outputs": outputs, "peak_rss_mib": _proc_status("VmHWM")})
    conn.close()


def _search_methods(tr, lines: List[str], K: int, bs: int) -> dict:
    """Our beam search and gluonnlp's BeamSearchSampler over the same length-sorted batches of `lines` on the
    translator's model (target ids per sentence, in sorted order)."""
    import mxnet as mx
    from nmt import search
    from nmt.batching import pad_sources
    from nmt.tokenizer import BOS_ID, EOS_ID
    ids = tr.source_ids(lines)
    order = sorted((i for i, x in enumerate(ids) if x), key=lambda i: len(ids[i]))
    d, net = tr.decode, tr.net
    batches = []
    for s in range(0, len(order), bs):
        rows = order[s:s + bs]
        src, src_len = pad_sources([ids[i] for i in rows], max(len(ids[i]) for i in rows) + 1)
        max_len = int(math.ceil(d.max_len_a * int(src_len.max()) + d.max_len_b))
        batches.append((rows, mx.nd.array(src, ctx=tr.ctx), mx.nd.array(src_len, ctx=tr.ctx), max_len))

    def ours():
        return [h[0][0] for rows, src, src_len, m in batches
                for h in search.beam_search(net, src, src_len, K, m, alpha=d.length_penalty_alpha)]

    def gluonnlp_sampler():
        from gluonnlp.model import BeamSearchSampler, BeamSearchScorer
        out = []
        for rows, src, src_len, m in batches:
            state = net.init_state(net.encode(src, src_len))

            def step(tokens, states, state=state):
                log_probs, new, _ = net.step(tokens.astype("float32"), state.with_arrays(states))
                return log_probs, new.arrays()
            sampler = BeamSearchSampler(K, step, EOS_ID, BeamSearchScorer(alpha=d.length_penalty_alpha, K=5.0,
                                                                          from_logits=False), max_length=m)
            samples, _, valid = sampler(mx.nd.full((len(rows),), BOS_ID, ctx=tr.ctx), state.arrays())
            samples, valid = samples.asnumpy(), valid.asnumpy()
            for r in range(len(rows)):
                seq = [int(x) for x in samples[r, 0, 1:valid[r, 0]]]
                out.append(seq[:-1] if seq and seq[-1] == EOS_ID else seq)
        return out
    return {"beam_search": ours, "gluonnlp_beam_search_sampler": gluonnlp_sampler}


def decode_model_worker(spec: dict, epochs: int) -> int:
    """Train the benchmark model for `epochs` epochs into spec["model_dir"]; returns its updates."""
    trainer = _new_trainer(spec, Path(spec["model_dir"]))
    updates = _run_updates(trainer, epochs * len(trainer.sampler))["updates"]
    trainer.save()
    return updates


def run_decode(spec: dict, device_counts: List[int]) -> dict:
    """Decoding on 1 device and on each further count in `device_counts`, in processes that take turns round by
    round; rates from the median time, ratios per round (both timed under the same load)."""
    cores = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    specs = [{**spec, "devices": n, "omp_num_threads": None if n == 1 or spec.get("gpus") else max(1, cores // n)}
             for n in [1] + [n for n in device_counts if n > 1]]
    results = run_interleaved(specs, decode_worker)
    one = results[0]
    rounds = one["windows"]
    n_sent = one["sentences"]

    def rate(windows, name):
        return {"sent_per_s": n_sent / statistics.median(w[name] for w in windows),
                "seconds": [w[name] for w in windows]}
    out = {k: one[k] for k in ("test_set", "sentences", "beam", "batch")}
    out["model_dir"] = (f"(benchmark model trained {spec['trained_updates']} updates)" if spec.get("trained_updates")
                        else spec["model_dir"])
    for name in ("beam_search", "gluonnlp_beam_search_sampler", "translator_beam", "translator_greedy"):
        out[name] = rate(rounds, name)
    out["speedup_vs_gluonnlp"] = statistics.median(w["gluonnlp_beam_search_sampler"] / w["beam_search"]
                                                   for w in rounds)
    hyps = one["outputs"]["beam_search"]
    out["identical_outputs"] = sum(a == b for a, b in zip(hyps, one["outputs"]["gluonnlp_beam_search_sampler"]))
    out["mean_output_tokens"] = sum(len(h) for h in hyps) / max(len(hyps), 1)
    out["peak_rss_mib"] = one["peak_rss_mib"]
    out["multi_device"] = []
    for res in results[1:]:
        mine = res["windows"]
        out["multi_device"].append({
            "devices": res["devices"], "omp_num_threads": res["omp_num_threads"],
            "translator_beam": rate(mine, "translator_beam"), "translator_greedy": rate(mine, "translator_greedy"),
            # per round: this translator (tokenizing, batching, detokenizing included) vs the one-device figures
            "beam_vs_gluonnlp": statistics.median(a["gluonnlp_beam_search_sampler"] / b["translator_beam"]
                                                  for a, b in zip(rounds, mine)),
            "beam_vs_1_device_translator": statistics.median(a["translator_beam"] / b["translator_beam"]
                                                             for a, b in zip(rounds, mine)),
            "identical_to_1_device": sum(a == b for a, b in zip(res["outputs"]["translator_beam"],
                                                                one["outputs"]["translator_beam"])),
            "peak_rss_mib": res["peak_rss_mib"]})
    return out


# -- orchestration ----------------------------------------------------------------------------------------------
def _in_fresh_process(fn, *args):
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as ex:
        return ex.submit(fn, *args).result()


def _summary(res: dict, peak: Optional[dict]) -> dict:
    w = res["windows"]
    spu = statistics.median(x["seconds"] / x["updates"] for x in w)
    rate = {k: statistics.median(x[k] / x["seconds"] for x in w) for k in ("updates", "sentences", "src_tokens",
                                                                        "tgt_tokens")}
    f = res["flops_per_token"]
    gflops = (rate["src_tokens"] * f["src_train_flops"] + rate["tgt_tokens"] * f["tgt_train_flops"]) / 1e9
    out = {"num_devices": res["num_devices"], "batch_size": res["batch_size"], "accum_steps": res["accum_steps"],
           "omp_num_threads": res["threads"]["OMP_NUM_THREADS"],
           "ms_per_update": spu * 1e3,
           "updates_per_s": rate["updates"], "sent_per_s": rate["sentences"], "src_tok_per_s": rate["src_tokens"],
           "tgt_tok_per_s": rate["tgt_tokens"], "tok_per_s": rate["src_tokens"] + rate["tgt_tokens"],
           "epoch_s": statistics.median(x["seconds"] / x["updates"] for x in w) * res["batches_per_epoch"],
           "useful_gflops": gflops, "peak_rss_mib": res["peak_rss_mib"],
           "bucket_shapes": res["bucket_shapes"], "real_positions": res["real_positions"]}
    if peak:
        out["frac_of_dot_peak"] = gflops / peak["dot_gflops"]
        out["frac_of_onednn_peak"] = gflops / peak["fc_gflops"]
    return out


def _plot(rows: List[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    batches = sorted({r["batch_size"] for r in rows})
    devices = sorted({r["num_devices"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(devices)
    for j, n in enumerate(devices):
        xs = [i + (j - (len(devices) - 1) / 2) * width for i in range(len(batches))]
        get = {r["batch_size"]: r for r in rows if r["num_devices"] == n}
        bars = axes[0].bar(xs, [get[b]["ms_per_update"] if b in get else 0 for b in batches], width,
                           label=f"{n} device(s)")
        axes[0].bar_label(bars, fmt="%.0f", fontsize=7)
        bars = axes[1].bar(xs, [get[b]["epoch_s"] if b in get else 0 for b in batches], width, label=f"{n} device(s)")
        axes[1].bar_label(bars, labels=[f"x{get[b]['speedup']:.2f}" if b in get else "" for b in batches], fontsize=7)
    for ax, label in ((axes[0], "time per update (ms)"), (axes[1], "time per epoch (s); labels: speedup vs 1 device")):
        ax.set_xticks(range(len(batches)))
        ax.set_xticklabels([f"batch {b}" for b in batches])
        ax.set_ylabel(label)
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def _machine() -> dict:
    import mxnet as mx
    from mxnet.runtime import Features
    from nmt.parallel import cpu_name
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
            "mxnet": mx.__version__, "onednn": Features().is_enabled("MKLDNN"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", help="offline mirror laid out like shared/data (else $NMT_DATA_DIR, cache)")
    p.add_argument("--recipe", default="tatoeba", help="dataset recipe (tatoeba or all)")
    p.add_argument("--src", default="ko")
    p.add_argument("--tgt", default="en")
    p.add_argument("--vocab-size", type=int, default=8000, help="SentencePiece pieces per language")
    p.add_argument("--embed-size", type=int, default=256)
    p.add_argument("--hidden-size", type=int, default=256)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--attention", default="dot")
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--tie-weights", action="store_true", help="tie target embedding and output projection")
    p.add_argument("--devices", default="1,2", help="device counts to sweep (default 1,2)")
    p.add_argument("--gpus", help="GPU ids to draw the devices from (e.g. 0,1,2,3); default: CPU contexts")
    p.add_argument("--amp", action="store_true", help="automatic mixed precision (GPUs only)")
    p.add_argument("--batch-sizes", default="64", help="global batches in sentences (default 64)")
    p.add_argument("--accum-steps", type=int, default=1, help="micro-batches per update (splits without devices)")
    p.add_argument("--bucketing", default="padding",
                   help="bucketing scheme(s) to sweep, comma-separated (padding, quantile; see nmt.batching); with "
                        "several, each row also gets its tokens/s against the first scheme's, per round")
    p.add_argument("--same-omp", action="store_true",
                   help="keep OMP_NUM_THREADS for several CPU contexts too (default: cores / contexts each, so that "
                        "the contexts together use the cores one context uses; with more the contexts run in turn, "
                        "see nmt.parallel.DataParallel)")
    p.add_argument("--side-by-side", action="store_true",
                   help="CPU: also time, for each device count N > 1, N separate processes training side by side, "
                        "each on one context with 1/N of the global batch and of the cores: the same sharing of "
                        "the cores without the split/aggregate machinery, which the N-context row is then compared "
                        "with (time_vs_side_by_side)")
    p.add_argument("--warmup", type=int, default=0, help="warm-up updates (0 = one epoch)")
    p.add_argument("--updates", type=int, default=0, help="updates per timed window (0 = one epoch)")
    p.add_argument("--repeats", type=int, default=3, help="timed windows per configuration (median reported)")
    p.add_argument("--no-peak", action="store_true", help="skip the sgemm peak measurement")
    p.add_argument("--decode", action="store_true", help="also benchmark decoding")
    p.add_argument("--decode-model-dir", help="trained model directory for --decode (default: train the benchmark "
                   "model for --decode-train-epochs epochs)")
    p.add_argument("--decode-train-epochs", type=int, default=3)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--decode-sentences", type=int, default=0, help="test sentences to decode (0 = all)")
    p.add_argument("--decode-repeats", type=int, default=2)
    p.add_argument("--decode-devices", default="1,2",
                   help="device counts for the Translator (default 1,2; CPU contexts get OMP_NUM_THREADS / N each)")
    p.add_argument("--native-ab", type=int, default=0, metavar="N",
                   help="also time the training step with and without nmt.native's training kernels (gradient sum "
                        "and norm, Adam), "
                        "alternating over the same N batches in one process (each device count and batch size)")
    p.add_argument("--memory-updates", type=int, default=0, help="RSS growth check over N updates of a tiny model")
    p.add_argument("--only-extras", action="store_true", help="skip the training sweep (decode/memory only)")
    p.add_argument("--json", type=Path, help="write all figures here")
    p.add_argument("--plot", type=Path, help="write the time-per-update/epoch plot here (PNG)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from nmt.config import ConfigError, DataConfig
    from nmt.recipes import load_data
    if args.amp and not args.gpus:
        raise SystemExit("error: --amp needs --gpus: automatic mixed precision is a GPU feature (float16 kernels)")
    if args.side_by_side and args.gpus:
        raise SystemExit("error: --side-by-side is for CPU contexts (processes sharing the same cores); "
                         "GPUs do not share theirs")
    devices = [int(x) for x in args.devices.split(",") if x.strip()]
    batch_sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    uneven = [(b, n) for b in batch_sizes for n in devices if n > 1 and b % n]
    if args.side_by_side and uneven:
        raise SystemExit(f"error: --side-by-side splits each global batch among the processes: batch {uneven[0][0]} "
                         f"does not split into {uneven[0][1]} equal parts (see --batch-sizes, --devices)")
    bucketings = [x.strip() for x in args.bucketing.split(",") if x.strip()]
    from nmt.batching import BUCKETINGS
    if not bucketings or set(bucketings) - set(BUCKETINGS):
        raise SystemExit(f"error: --bucketing takes a comma-separated list of {', '.join(BUCKETINGS)} "
                         f"(got {args.bucketing!r})")
    load_before = _loadavg()
    data = dict(recipe=args.recipe, data_dir=args.data_dir, src_lang=args.src, tgt_lang=args.tgt,
                vocab_size=args.vocab_size)
    model = dict(embed_size=args.embed_size, hidden_size=args.hidden_size, num_layers=args.num_layers,
                 attention=args.attention, dropout=args.dropout, tie_weights=args.tie_weights,
                 word_dropout=0.0, lexical_model=False)   # as in the GNMT recipe this is compared with
    try:
        splits = load_data(DataConfig(**data))   # here only to fail early with a clear message
    except (ConfigError, OSError, ValueError) as e:
        raise SystemExit(f"error: {e}")
    base = {"data": data, "model": model,
            "train": dict(progress=False, valid_every=0, max_epochs=10 ** 6, seed=1, patience=0)}
    report: Dict[str, object] = {"machine": _machine(), "loadavg_before": load_before,
                                 "data": {"recipe": args.recipe, "direction": f"{args.src}-{args.tgt}",
                                          "train_pairs": len(splits.train)}, "model": model}
    peak = None if args.no_peak else _in_fresh_process(peak_worker)
    report["peak"] = peak
    if peak:
        print(f"sgemm 2048^3 float32 with {os.environ.get('OMP_NUM_THREADS', 'all')} OpenMP thread(s): "
              f"nd.dot {peak['dot_gflops']:.1f} GFLOP/s, oneDNN FullyConnected {peak['fc_gflops']:.1f} GFLOP/s")
    sweep: Dict[int, List[dict]] = {}
    for b in batch_sizes:
        sweep[b] = specs = []
        for bucketing, n in ((k, n) for k in bucketings for n in devices):
            gpus = None
            if args.gpus:
                ids = [x for x in args.gpus.split(",") if x.strip()]
                if n > len(ids):
                    raise SystemExit(f"error: --devices asks for {n} GPUs but --gpus lists {len(ids)}")
                gpus = ",".join(ids[:n]) + ","
            specs.append({**base, "data": {**data, "batch_size": b, "bucketing": bucketing},
                          "warmup": args.warmup, "updates": args.updates,
                          "repeats": args.repeats,
                          "omp_num_threads": (None if gpus or n == 1 or args.same_omp
                                              else max(1, int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count())
                                                       // n)),
                          "train": {**base["train"], "cpu_devices": 1 if gpus else n, "gpus": gpus,
                                    "accum_steps": args.accum_steps, **({"amp": True} if args.amp else {})}})
            if args.side_by_side and n > 1:   # the same cores shared by n one-context trainers on b / n each
                alone = specs[-1]
                specs.append({**alone, "side_by_side": n, "data": {**alone["data"], "batch_size": b // n},
                              "train": {**alone["train"], "cpu_devices": 1}})
    rows = []
    for b, specs in ([] if args.only_extras else sweep.items()):
        load = _loadavg()
        results = run_interleaved(specs)
        for spec, res in zip(specs, results):
            n, bucketing, side = res["num_devices"], spec["data"]["bucketing"], spec.get("side_by_side")
            one = next((r for s, r in zip(specs, results) if r["num_devices"] == 1 and not s.get("side_by_side")
                        and s["data"]["bucketing"] == bucketing), None)
            first = next(r for s, r in zip(specs, results)
                         if r["num_devices"] == res["num_devices"] and s.get("side_by_side") == side
                         and s["data"]["bucketing"] == bucketings[0])
            pair = None if side else next((r for s, r in zip(specs, results) if s.get("side_by_side") == n
                                           and s["data"]["bucketing"] == bucketing), None)
            row = _summary(res, peak)
            row["bucketing"] = bucketing
            row["side_by_side"] = side
            if side:   # n processes on b / n sentences each: per update, the global batch; an epoch's sentences
                row["batch_size"], row["process_batch_size"] = b, res["batch_size"]   # are split among them
                row["epoch_s"] /= side
            row["time_vs_side_by_side"] = pair and statistics.median(   # per round, as the speedup
                x["seconds"] / x["updates"] / (p["seconds"] / p["updates"])
                for x, p in zip(res["windows"], pair["windows"]))
            row["tok_per_s_vs_first_bucketing"] = statistics.median(   # per round, as the speedup
                (x["src_tokens"] + x["tgt_tokens"]) / x["seconds"] / ((f["src_tokens"] + f["tgt_tokens"]) / f["seconds"])
                for x, f in zip(res["windows"], first["windows"])) if len(bucketings) > 1 else None
            row["loadavg_before_after"] = [load, _loadavg()]   # other jobs on the machine skew a row
            row["speedup"] = one and statistics.median(   # per round: both timed under the same load
                a["seconds"] / a["updates"] / (x["seconds"] / x["updates"])
                for a, x in zip(one["windows"], res["windows"]))
            row["time_vs_1_device"] = 1.0 / row["speedup"] if row["speedup"] else None
            row["efficiency"] = row["speedup"] / (side or n) if row["speedup"] else None
            row["x_gnmt_reference"] = row["tok_per_s"] / GNMT_REFERENCE_TOK_PER_S
            rows.append({**row, "raw": res})
            print((f"{side} processes side by side, batch {b // side} each" if side else f"devices {n} batch {b:4d}")
                  + (f" {bucketing}" if len(bucketings) > 1 else "")
                  + f": {row['ms_per_update']:7.1f} ms/update  {row['epoch_s']:6.1f} s/epoch  "
                  f"{row['sent_per_s']:6.0f} sent/s  {row['src_tok_per_s']:6.0f}+{row['tgt_tok_per_s']:.0f} tok/s  "
                  f"{row['useful_gflops']:5.1f} GFLOP/s  "
                  + (f"time/update x{row['time_vs_1_device']:.2f} of 1 device (speedup {row['speedup']:.2f}, "
                     f"efficiency {row['efficiency']:.2f})  " if one else "")
                  + f"x{row['x_gnmt_reference']:.2f} GNMT ref  peak RSS {row['peak_rss_mib']:.0f} MiB"
                  + (f"  {100 * row['frac_of_dot_peak']:.0f}% of nd.dot, "
                     f"{100 * row['frac_of_onednn_peak']:.0f}% of oneDNN sgemm" if peak else "")
                  + (f"  tokens/s x{row['tok_per_s_vs_first_bucketing']:.2f} of {bucketings[0]}"
                     if row["tok_per_s_vs_first_bucketing"] else "")
                  + (f"  time/update x{row['time_vs_side_by_side']:.2f} of {n} processes side by side"
                     if row["time_vs_side_by_side"] else ""))
    report["train"] = rows
    if args.native_ab:
        report["native_ab"] = []
        for spec in ([] if args.gpus else [spec for specs in sweep.values() for spec in specs]):
            ab = _in_fresh_process(native_ab_worker, {**spec, "ab_batches": args.native_ab})
            report["native_ab"].append(ab)
            n, b = spec["train"]["cpu_devices"], spec["data"]["batch_size"]
            print(f"devices {n} batch {b:4d}: " + (
                f"{ab['native_ms_per_update']:.1f} ms/update with the native training kernels, "
                f"{ab['mxnet_ops_ms_per_update']:.1f} with MXNet's operators (x{ab['speedup']:.3f}, "
                f"{ab['rounds']} rounds of {ab['batches']} batches)" if "speedup" in ab else ab["native_ops"]))
    if args.memory_updates:
        tiny = {**base, "model": dict(embed_size=32, hidden_size=32, num_layers=1, dropout=0.1, word_dropout=0.0,
                                      lexical_model=False),
                "data": {**data, "batch_size": 32}, "updates": args.memory_updates}
        report["memory"] = mem = _in_fresh_process(memory_worker, tiny)
        print(f"memory: RSS {mem['rss_at_100']:.0f} MiB after 100 updates of a tiny model, {mem['rss_at_end']:.0f} MiB "
              f"after {mem['updates']}; median of the samples {mem['median_first_half']:.1f} MiB in the first half, "
              f"{mem['median_second_half']:.1f} MiB in the second; every 100 updates: {list(mem['rss_mib'].values())}")
    if args.decode:
        devices_decode = [int(x) for x in args.decode_devices.split(",") if x.strip()]
        with tempfile.TemporaryDirectory(prefix="nmt-bench-dec-") as tmp:
            spec = {**base, "data": {**data, "batch_size": 64}, "model_dir": args.decode_model_dir,
                    "checkpoint": "best", "beam": args.beam, "batch": args.decode_batch, "gpus": args.gpus,
                    "sentences": args.decode_sentences, "repeats": args.decode_repeats}
            if not args.decode_model_dir:   # train the benchmark model briefly, so that hypotheses end with EOS
                spec["model_dir"] = str(Path(tmp) / "model")
                spec["trained_updates"] = _in_fresh_process(decode_model_worker, spec, args.decode_train_epochs)
                spec["checkpoint"] = "latest"
            report["decode"] = dec = run_decode(spec, devices_decode)
        print(f"decode {dec['test_set']} ({dec['sentences']} sentences, beam {dec['beam']}, batch {dec['batch']}): "
              f"beam_search {dec['beam_search']['sent_per_s']:.0f} sent/s vs gluonnlp BeamSearchSampler "
              f"{dec['gluonnlp_beam_search_sampler']['sent_per_s']:.0f} (x{dec['speedup_vs_gluonnlp']:.2f}, "
              f"{dec['identical_outputs']}/{dec['sentences']} identical); Translator beam "
              f"{dec['translator_beam']['sent_per_s']:.0f}, greedy {dec['translator_greedy']['sent_per_s']:.0f} "
              f"sent/s; peak RSS {dec['peak_rss_mib']:.0f} MiB")
        for m in dec["multi_device"]:
            print(f"  Translator on {len(m['devices'])} devices ({', '.join(m['devices'])}, OMP threads "
                  f"{m['omp_num_threads']} each): beam {m['translator_beam']['sent_per_s']:.0f} sent/s "
                  f"(x{m['beam_vs_gluonnlp']:.2f} gluonnlp's sampler, x{m['beam_vs_1_device_translator']:.2f} the "
                  f"1-device Translator, {m['identical_to_1_device']}/{dec['sentences']} identical), greedy "
                  f"{m['translator_greedy']['sent_per_s']:.0f}; peak RSS {m['peak_rss_mib']:.0f} MiB")
    report["loadavg_after"] = _loadavg()
    print(f"load average before {load_before}, after {report['loadavg_after']}")
    if args.json:
        from nmt.atomic import atomic_write_text
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    if args.plot and rows:
        rows = [r for r in rows if r["bucketing"] == bucketings[0] and not r["side_by_side"]]
        m = report["machine"]
        _plot(rows, args.plot, f"{args.recipe} {args.src}-{args.tgt}, embed/hidden {args.embed_size}/{args.hidden_size}, "
                               f"{args.num_layers} layers; {m['cpu']}, {m['cores']} cores, OMP {m['OMP_NUM_THREADS']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
