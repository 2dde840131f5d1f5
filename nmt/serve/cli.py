"""`nmt-serve`: load each model once and serve it over HTTP with uvicorn.

    nmt-serve --model-dir models/ko-en [--model-dir models/en-ko] [--host 127.0.0.1] [--port 8080]

uvicorn handles SIGTERM and Ctrl-C gracefully: it stops listening (new connections are refused), answers the
requests in flight, then the application's shutdown closes the batchers.
"""
from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
import socket
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from nmt.commands import (CommandParser, Once, import_failure, nonempty, number, role_variable, run_cli, shell_word,
                          threads_variable, with_version)
from nmt.config import Config, ConfigError
from nmt.serve.batcher import DEFAULT_MAX_WAIT_MS
from nmt.signals import leave_hung_up_terminal, stopping_signals


LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    from nmt.serve.schema import LINES_PER_SENTENCE, Limits   # (pydantic and starlette: once nmt-serve runs)
    lim = Limits()
    count = number(int, 1)
    p = CommandParser(prog="nmt-serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", action="append", required=True, type=nonempty(Path),
                   help="a trained model directory; repeat for several language pairs")
    p.add_argument("--host", action=Once, default="127.0.0.1", type=nonempty(),
                   help="address to listen on (0.0.0.0: every interface; default %(default)s)")
    p.add_argument("--port", action=Once, type=number(int, 1, 65535), default=8080, help="port (default %(default)s)")
    p.add_argument("--ensemble", nargs="+", action="extend", default=[], metavar="DIR", type=nonempty(Path),
                   help="further model directories that decode together with the --model-dir of their language "
                        "pair, following the mean of their log-probabilities (same vocabularies; each model once: "
                        "not a copy or an export of another member's checkpoint)")
    p.add_argument("--checkpoint", action=Once, default="best", type=nonempty(),
                   help="best, latest, avg or a step number (default %(default)s); applies to all")
    p.add_argument("--max-batch", type=count, default=None,
                   help="most sentences decoded together (default: the model's decode batch size)")
    p.add_argument("--max-wait-ms", type=number(float, 0), default=DEFAULT_MAX_WAIT_MS,
                   help="how long an idle worker waits after a request for others to start decoding with it "
                        "(default %(default)s)")
    p.add_argument("--max-queue", type=count, default=1024,
                   help="sentences queued per model before requests get 503 with Retry-After, blank ones not counted "
                        "(default %(default)s)")
    p.add_argument("--max-sentences", type=count, default=lim.max_sentences,
                   help="sentences per request; blank ones, which cost no decoding, are not counted (the lines, "
                        f"blank ones included, are at most {LINES_PER_SENTENCE} per sentence) (default "
                        "%(default)s)")
    p.add_argument("--max-beam-size", type=count, default=lim.max_beam_size,
                   help="largest beam_size a request may ask for (default %(default)s)")
    p.add_argument("--max-body-bytes", type=count, default=lim.max_body_bytes,
                   help="largest request body (default %(default)s)")
    p.add_argument("--timeout", type=number(float, 0, low_open=True), default=lim.timeout_s,
                   help="seconds per request (default %(default)s)")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="(default %(default)s)")
    args = with_version(p).parse_args(argv)
    if args.max_wait_ms / 1000 >= args.timeout:
        p.error(f"--max-wait-ms {args.max_wait_ms:g} is not shorter than --timeout {args.timeout:g} s: every request "
                "would time out waiting for others to join its batch")
    if args.max_sentences > args.max_queue:
        p.error(f"--max-sentences {args.max_sentences} is more than --max-queue {args.max_queue}: a request of more "
                f"than {args.max_queue} sentences would get 503 (queue full) on every retry; give a --max-queue of at "
                "least --max-sentences, or a smaller --max-sentences")
    return args


def build_app(args: argparse.Namespace):
    """The application over every --model-dir, each loaded once."""
    from nmt.serve.api import Service, create_app
    from nmt.serve.schema import Limits
    from nmt.search import search_too_wide
    from nmt.translate import Translator
    pairs = {d: _pair(d, "--model-dir") for d in args.model_dir}
    _one_model_per_pair(args.model_dir, pairs, args.checkpoint)
    pairs.update({d: _pair(d, "--ensemble") for d in args.ensemble})
    for d in args.ensemble:
        if not any(pairs[m] == pairs[d] for m in args.model_dir):
            raise ConfigError(f"--ensemble {d} translates {'-'.join(pairs[d])}, which no --model-dir does: an "
                              "ensemble member joins the --model-dir of its language pair")
    translators = [Translator.from_dir(d, which=args.checkpoint,
                                       ensemble=[e for e in args.ensemble if pairs[e] == pairs[d]])
                   for d in args.model_dir]
    for tr in translators:
        too_wide = search_too_wide(args.max_beam_size, args.max_batch or tr.decode.batch_size, tr.tgt_tok.vocab_size,
                                   "--max-beam-size", "--max-batch")
        if too_wide:
            raise ConfigError(too_wide)
        if tr.decode.beam_size > args.max_beam_size:   # else every request without its own beam_size is refused
            raise ConfigError(f"--max-beam-size {args.max_beam_size} is below the beam size of --model-dir "
                              f"{tr.model_dir} ({tr.decode.beam_size}, its config.json's decode.beam_size), which "
                              f"requests without a beam_size use: give --max-beam-size {tr.decode.beam_size} or more")
    limits = Limits(max_body_bytes=args.max_body_bytes, max_sentences=args.max_sentences,
                    max_beam_size=args.max_beam_size, timeout_s=args.timeout)
    service = Service(translators, limits, args.max_batch, args.max_wait_ms, args.max_queue)
    return create_app(service)


def _one_model_per_pair(model_dirs: Sequence[str], pairs: dict, which: str) -> None:
    """ConfigError, before any model loads, when two --model-dir translate the same language pair: a request names
    only its languages. Meant to decode together, the second is an --ensemble member, unless its `which` checkpoint
    holds the first's parameters (a copy, an export), which an ensemble refuses."""
    first: dict = {}
    for d in model_dirs:
        if pairs[d] in first:
            other, pair = first[pairs[d]], "-".join(pairs[d])
            shared = _shared_vocabularies(other, d)
            same = shared and _same_parameters(other, d, which)
            said = (f"--model-dir {d} is given twice" if Path(other).resolve() == Path(d).resolve() else
                    f"--model-dir {other} and --model-dir {d} both translate {pair}; a request names only its "
                    "languages, so the service takes one model per language pair" + (
                        f" (their --checkpoint {which} holds the same parameters, sha256 {same[:12]}: a copy or an "
                        "export; give one of them)" if same else
                        f" (to decode the two together, as an ensemble: --model-dir {shell_word(other)} --ensemble "
                        f"{shell_word(d)})" if shared else " (they cannot decode together, as an ensemble: their "
                        "vocabularies differ)" if shared is False else ""))
            raise ConfigError(said)
        first[pairs[d]] = d


def _same_parameters(a: str, b: str, which: str) -> Optional[str]:
    """The sha256 of the `which` parameters of model directories `a` and `b` when they are the same (their manifests'
    record, as `nmt.members` compares an ensemble's members); None when they differ or cannot be looked up (loading
    names why)."""
    from nmt import checkpoint as ckpt
    try:
        shas = {ckpt.params_sha256(ckpt.params_path(Path(d), str(which), quiet=True)) for d in (a, b)}
    except ckpt.CheckpointError:
        return None
    return shas.pop() if len(shas) == 1 else None


def _shared_vocabularies(a: str, b: str) -> Optional[bool]:
    """Whether model directories `a` and `b` have the same vocabularies, as the members of an ensemble must (None:
    a file of them cannot be read, which loading them names)."""
    from nmt.config import Config
    from nmt.tokenizer import TokenizerError, load_tokenizers
    try:
        toks = [load_tokenizers(d, c.data.src_lang, c.data.tgt_lang, c.model.shared_vocab)
                for d, c in ((d, Config.load(Path(d) / "config.json")) for d in (a, b))]
    except (ConfigError, TokenizerError):
        return None
    return all(x.same_vocabulary(y) for x, y in zip(*toks))


def _pair(model_dir: str, flag: str) -> tuple:
    """(source, target) language of a model directory, from its config.json."""
    from nmt.checkpoint import config_of
    data = Config.load(config_of(model_dir, flag)).data
    return data.src_lang, data.tgt_lang


def uvicorn_config(app, host: str, port: int, log_level: str = "info", max_queue: int = 1024):
    """uvicorn settings of the CLI (and of the tests' servers on a thread): in-flight requests get as long as the
    per-request limit to finish at shutdown; connections beyond a bound get uvicorn's own 503."""
    import uvicorn
    timeout = app.state.service.limits.timeout_s
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=int(timeout) + 1,
                          limit_concurrency=4 * max_queue + 64, lifespan="on")


def check_address(host: str, port: int) -> None:
    """Fail before the models load (which takes a while) if uvicorn could not listen on `host`:`port`: the host
    must resolve and the port be free. Binds and closes one socket as uvicorn will (SO_REUSEADDR)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise ConfigError(f"--host {host}: cannot be resolved ({e.strerror})") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as e:
            hint = {errno.EADDRINUSE: "; give another --port, or stop what is listening on it",
                    errno.EADDRNOTAVAIL: "; --host must be an address of this machine (127.0.0.1, 0.0.0.0: all)",
                    errno.EACCES: "; ports below 1024 need privileges"}.get(e.errno, "")
            raise ConfigError(f"--host {host} --port {port}: cannot listen there ({e.strerror}){hint}") from None


class _Cancelled(logging.Filter):
    """Drops uvicorn's tracebacks of the tasks its forced exit (a second Ctrl-C) leaves to be cancelled: the
    lifespan and each request in flight (whose client gets uvicorn's plain-text 500), which it counts."""
    def __init__(self, server) -> None:
        super().__init__()
        self.server, self.requests = server, 0

    def filter(self, record: logging.LogRecord) -> bool:
        cancelled = (record.exc_info and record.exc_info[0] is asyncio.CancelledError
                     or record.getMessage().rstrip().endswith("asyncio.exceptions.CancelledError"))   # (lifespan's)
        if self.server.force_exit and cancelled:
            self.requests += record.getMessage().startswith("Exception in ASGI application")
            return False
        return True


def _server(config):
    """A uvicorn Server over `config` that leaves alone the signals this process ignores, which uvicorn takes while it
    runs: SIGINT in a script's background job, whose Ctrl-C is the script's (`nmt.signals.stopping_signals`)."""
    import uvicorn

    class Server(uvicorn.Server):
        taken = stopping_signals()   # (as the process started, before uvicorn's handlers)

        def handle_exit(self, sig, frame) -> None:
            if sig in self.taken:
                super().handle_exit(sig, frame)
    return Server(config)


def run_server(server) -> int:
    """Run a uvicorn server until a signal stops it gracefully: SIGTERM (exit 143), Ctrl-C (130) or SIGHUP (129, a
    closed terminal; unless it was ignored, as under nohup). uvicorn raises the signals it caught again once it has
    shut down; a handler of our own takes them (after a second Ctrl-C, its forced exit, that raised KeyboardInterrupt
    inside the event loop, whose tasks then ended with tracebacks; after SIGTERM, the process died at once). A start
    that fails (uvicorn exits 3) is a ConfigError naming --host and --port."""
    caught, quiet, log = [], _Cancelled(server), logging.getLogger("uvicorn.error")

    def on_signal(sig, frame) -> None:
        caught.append(sig)
        leave_hung_up_terminal(sig)
        server.should_exit = True
    previous = {sig: signal.signal(sig, on_signal) for sig in stopping_signals()}
    log.addFilter(quiet)
    try:
        server.run()
    except SystemExit:   # uvicorn's startup failed (the port taken since check_address: two servers started at once)
        if server.started:
            raise
        check_address(server.config.host, server.config.port)   # the reason, named by flag
        raise ConfigError(f"--host {server.config.host} --port {server.config.port}: the server could not start "
                          "(uvicorn's message above)") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log.removeFilter(quiet)
    if quiet.requests:
        logging.getLogger("nmt.serve").warning("forced exit: %d request(s) in flight were not answered",
                                               quiet.requests)
    return 128 + next((s for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT) if s in caught)) if caught else 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of `nmt-serve` and scripts/serve.py, run as every nmt command (`run_cli`): importing it loads no
    framework (nor does --help), so that Ctrl-C, SIGTERM or SIGHUP while the framework or the models load end the
    command with its exit code and no traceback; run_server takes them its own way once serving."""
    def run() -> int:
        args = parse_args(argv)
        threads_variable()   # (after --help and --version, which load no MXNet)
        role_variable()
        return _serve(args)
    return run_cli(run)


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        check_address(args.host, args.port)
        app = build_app(args)
        return run_server(_server(uvicorn_config(app, args.host, args.port, args.log_level, args.max_queue)))
    except (ValueError, OSError) as e:   # (a model's files unreadable, a value uvicorn refuses: said as run_cli says)
        if getattr(e, "errno", None) == errno.ENAMETOOLONG:
            raise   # (run_cli's words for it, as every command's)
        print(f"error: {import_failure(e) or e}", file=sys.stderr)   # (MXNet's library that cannot load: named)
        return 2


if __name__ == "__main__":   # `python -m nmt.serve.cli`: nmt-serve (it did nothing, exit 0)
    raise SystemExit(main())
