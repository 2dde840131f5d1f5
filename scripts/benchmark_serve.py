#!/usr/bin/env python
"""Throughput and latency of `nmt-serve` under N concurrent clients, against the offline batched Translator on
the same model and sentences, measured in alternation in one run.

    python scripts/benchmark_serve.py --model-dir models/ko-en [--src-file test.ko] [--clients 16]
        [--sentences-per-request 1] [--seconds 8] [--rounds 3] [--json results/benchmark_serve.json]

The server runs as a separate process (scripts/serve.py) on 127.0.0.1 only, so clients and server do not share
one interpreter; the clients are asyncio tasks over one httpx connection pool, each sending its next request as
soon as the last is answered, for a bounded time. Reported per round: requests/s, sentences/s, p50/p95/p99
latency, errors by status; offline sentences/s at the configured batch size and at the most sentences the clients
hold in flight (clients x sentences per request: what small batches cost any server); the service's continuous
batching in this process with the same closed-loop clients simulated, without HTTP (what serving over HTTP adds);
and served / offline. Sentences: --src-file, else the model's configured test source file.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import httpx

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "scripts"):   # run from a checkout without installing; scripts/conditions.py
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
import conditions  # noqa: E402  (scripts/, beside this one)
from nmt.commands import number  # noqa: E402
from nmt.config import ConfigError  # noqa: E402
from nmt.serve.batcher import DEFAULT_MAX_WAIT_MS  # noqa: E402  (stdlib-only module)

HOST = "127.0.0.1"   # loopback only: this tool never sends traffic off the machine


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--src-file", help="sentences to send (default: the model's test set)")
    p.add_argument("--data-dir", help="offline mirror for the recipe's test set (else the model's, $NMT_DATA_DIR)")
    p.add_argument("--max-sentences", type=number(int, 1), default=400, help="distinct sentences used (cycled)")
    p.add_argument("--clients", type=number(int, 1), default=16)
    p.add_argument("--sentences-per-request", type=number(int, 1), default=1)
    p.add_argument("--seconds", type=number(float, 0, low_open=True), default=8.0,
                   help="length of each served measurement")
    p.add_argument("--rounds", type=number(int, 1), default=3, help="offline/served alternations")
    p.add_argument("--beam-size", type=number(int, 1), default=None, help="default: the model's")
    p.add_argument("--max-wait-ms", type=number(float, 0), default=DEFAULT_MAX_WAIT_MS,
                   help="the server's batching wait")
    p.add_argument("--json", default=str(REPO / "results" / "benchmark_serve.json"),
                   help="the JSON of figures (default: results/benchmark_serve.json, which docs/performance.md cites: "
                        "give another for a trial run)")
    args = p.parse_args(argv)
    if args.src_file and args.data_dir:   # (it was ignored without a word)
        p.error(f"--data-dir {args.data_dir} is where the model's test set is read; --src-file {args.src_file} is "
                "read where it is: drop it")
    from nmt.serve.schema import Limits   # the server's --timeout, which it gets no flag for
    if args.max_wait_ms / 1000 >= Limits().timeout_s:   # (the server would refuse it after this script loaded all)
        p.error(f"--max-wait-ms {args.max_wait_ms:g} is not shorter than the server's timeout of "
                f"{Limits().timeout_s:g} s")
    return args


def sentences(args: argparse.Namespace, translator) -> List[str]:
    """The benchmark's source sentences (non-empty lines): --src-file, else the model's first test set."""
    from nmt.corpus import CorpusError
    from nmt.scoring import first_test_sources
    try:
        _, lines = first_test_sources(translator.config, args.data_dir, args.src_file)
    except (ConfigError, CorpusError, OSError) as e:
        raise ConfigError(f"no sentences: {e}") from None
    return [x for x in lines if x and x.strip()][:args.max_sentences]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_server(args: argparse.Namespace, beam: int) -> (subprocess.Popen, str):
    """scripts/serve.py on a free loopback port, its request limits raised to the requests of this benchmark (a beam
    or a request above the defaults was refused, every request an error); returns (process, base URL) once /health
    answers."""
    from nmt.serve.schema import Limits
    port = free_port()
    cmd = [sys.executable, str(REPO / "scripts" / "serve.py"), "--model-dir", args.model_dir, "--host", HOST,
           "--port", str(port), "--max-wait-ms", str(args.max_wait_ms), "--log-level", "warning",
           "--max-queue", str(max(1024, 4 * args.clients * args.sentences_per_request)),
           "--max-beam-size", str(max(beam, Limits().max_beam_size)),
           "--max-sentences", str(max(args.sentences_per_request, Limits().max_sentences))]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO)})
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"error: the server exited with {proc.returncode} (its error is above)")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("error: the server did not start within 120 s")


async def load(url: str, lines: List[str], clients: int, per_request: int, seconds: float,
               beam: int) -> Dict[str, object]:
    """`clients` closed-loop clients for `seconds` after a warm-up: throughput, latency percentiles, errors and the
    server's batching (`batching`) over the same time."""
    latencies: List[float] = []
    errors: Dict[str, int] = {}
    sent = [0]

    async def client(c: httpx.AsyncClient, k: int, until: float) -> None:
        i = k * per_request
        while time.monotonic() < until:
            batch = [lines[(i + j) % len(lines)] for j in range(per_request)]
            i += clients * per_request
            t0 = time.perf_counter()
            try:
                r = await c.post("/translate", json={"text": batch, "beam_size": beam})
                key = None if r.status_code == 200 else str(r.status_code)
            except httpx.HTTPError as e:
                key = type(e).__name__
            if key is None:
                latencies.append(time.perf_counter() - t0)
                sent[0] += per_request
            else:
                errors[key] = errors.get(key, 0) + 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        await asyncio.gather(*[client(c, k, time.monotonic() + min(2.0, seconds)) for k in range(clients)])  # warm
        latencies.clear(), errors.clear()
        sent[0] = 0
        before, t0 = worker_stats(url), time.perf_counter()   # (the warm-up's planning of new shapes left out)
        await asyncio.gather(*[client(c, k, time.monotonic() + seconds) for k in range(clients)])
        elapsed = time.perf_counter() - t0
        server = batching(before, worker_stats(url), elapsed)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else None   # (NaN was no JSON: null)
    ms = {f"p{k}_ms": None if q is None else round(q[k - 1] * 1000, 1) for k in (50, 95, 99)}
    return {"seconds": round(elapsed, 2), "requests": len(latencies),
            "requests_per_s": round(len(latencies) / elapsed, 2),
            "sentences_per_s": round(sent[0] / elapsed, 2), **ms, "errors": errors, "server": server}


def worker_stats(url: str) -> Dict[str, float]:
    """The server's batcher counters (steps, sentences, seconds in search steps) from /health."""
    return next(iter(httpx.get(url + "/health", timeout=10).json()["models"].values()))


def batching(before: Dict[str, float], after: Dict[str, float], seconds: float) -> Dict[str, float]:
    """Mean batch (sentences advanced per search step), model time per sentence and the worker's busy share
    between two /health readings."""
    steps, sents = after["steps"] - before["steps"], after["sentences"] - before["sentences"]
    busy = after["busy_seconds"] - before["busy_seconds"]
    return {"mean_batch": round((after["sentence_steps"] - before["sentence_steps"]) / max(steps, 1), 2),
            "model_ms_per_sentence": round(1000 * busy / max(sents, 1), 2), "worker_busy": round(busy / seconds, 3)}


def offline(translator, lines: List[str], beam: int, batch_size: int) -> Dict[str, object]:
    """The batched Translator on the same sentences, `batch_size` at a time (length-sorted), after a warm-up."""
    configured = translator.decode
    translator.decode = dataclasses.replace(configured, batch_size=batch_size)
    try:
        translator.translate(lines[:batch_size], beam_size=beam)
        t0 = time.perf_counter()
        translator.translate(lines, beam_size=beam)
        seconds = time.perf_counter() - t0
    finally:
        translator.decode = configured
    return {"sentences": len(lines), "seconds": round(seconds, 3), "sentences_per_s": round(len(lines) / seconds, 2),
            "batch_size": batch_size}


def in_process(translator, lines: List[str], clients: int, per_request: int, seconds: float,
               beam: int) -> Dict[str, object]:
    """The service's continuous batching (`Translator.continuous`) without HTTP: `clients` closed-loop clients
    simulated in this process, each adding its next request's sentences as soon as its last are all done."""
    decoder = translator.continuous(beam, 1)
    left = {}   # client -> sentences of its request not done yet
    nxt = [0]

    def send(k: int) -> None:
        batch = [lines[(nxt[0] + j) % len(lines)] for j in range(per_request)]
        decoder.add(batch, [(k, j) for j in range(per_request)])
        nxt[0] += per_request
        left[k] = per_request

    def run(until: float) -> int:
        done = 0
        while time.perf_counter() < until:
            for (k, _), *_ in decoder.step():
                done += 1
                left[k] -= 1
                if not left[k]:
                    send(k)
        return done

    for k in range(clients):
        send(k)
    run(time.perf_counter() + min(2.0, seconds))   # warm-up: the step graph of each batch shape is planned once
    t0 = time.perf_counter()
    done = run(t0 + seconds)
    elapsed = time.perf_counter() - t0
    return {"seconds": round(elapsed, 2), "sentences_per_s": round(done / elapsed, 2)}


def main(argv=None) -> int:
    from nmt.atomic import atomic_write_text
    from nmt.translate import Translator
    args = parse_args(argv)
    conditions.check_outputs([args.model_dir], {"--src-file": args.src_file}, json=args.json)
    load0 = os.getloadavg()
    translator = Translator.from_dir(args.model_dir)
    lines = sentences(args, translator)
    beam = translator.decode.beam_size if args.beam_size is None else args.beam_size
    # The most sentences the clients can have in flight: the offline Translator at that batch size too, to tell
    # the cost of small batches (the same for any server) from the cost of serving them.
    in_flight = min(args.clients * args.sentences_per_request, translator.decode.batch_size)
    proc, url = start_server(args, beam)
    rounds = []
    try:
        for r in range(args.rounds):   # alternate, so both sides see the same machine load
            off = offline(translator, lines, beam, translator.decode.batch_size)
            off_small = off if in_flight == off["batch_size"] else offline(translator, lines, beam, in_flight)
            local = in_process(translator, lines, args.clients, args.sentences_per_request, args.seconds, beam)
            served = asyncio.run(load(url, lines, args.clients, args.sentences_per_request, args.seconds, beam))
            rounds.append({"round": r + 1, "offline": off, "offline_in_flight_batch": off_small,
                           "continuous_in_process": local, "served": served,
                           "served_over_offline": round(served["sentences_per_s"] / off["sentences_per_s"], 3),
                           "served_over_offline_in_flight_batch":
                               round(served["sentences_per_s"] / off_small["sentences_per_s"], 3),
                           "in_process_over_offline": round(local["sentences_per_s"] / off["sentences_per_s"], 3)})
            print(json.dumps(rounds[-1]), flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    medians = {key: statistics.median(x[key] for x in rounds) for key in
               ("served_over_offline", "served_over_offline_in_flight_batch", "in_process_over_offline")}
    result = {"model_dir": str(args.model_dir), "beam_size": beam,
              "model": {**vars(translator.config.model), "src_vocab": translator.src_tok.vocab_size,
                        "tgt_vocab": translator.tgt_tok.vocab_size},
              "clients": args.clients, "sentences_per_request": args.sentences_per_request,
              "max_wait_ms": args.max_wait_ms, "distinct_sentences": len(lines), "rounds": rounds,
              **{"median_" + key: value for key, value in medians.items()},
              "goal": ">= 0.70 at 16 clients x 1 sentence",
              "machine": conditions.machine(load0)}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.json), json.dumps(result, indent=2) + "\n")
    print(f"served/offline {medians['served_over_offline']:.2f}, against offline at batch {in_flight} "
          f"{medians['served_over_offline_in_flight_batch']:.2f}; continuous batching without HTTP / offline "
          f"{medians['in_process_over_offline']:.2f} (medians of {len(rounds)}); wrote {args.json}")
    return 0


if __name__ == "__main__":
    from nmt.commands import run_cli
    sys.exit(run_cli(main))   # bad input: one line, exit 2
