"""`nmt-serve`: load each model once and serve it over HTTP with uvicorn.

    nmt-serve --model-dir models/ko-en [--model-dir models/en-ko] [--host 127.0.0.1] [--port 8080]

uvicorn handles SIGTERM and Ctrl-C gracefully: it stops listening (new connections are refused), answers the
requests in flight, then the application's shutdown closes the batchers. `background_server` runs the same
server on a thread, for the tests and the benchmark.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import threading
import time
from typing import Iterator, List, Optional, Sequence

from nmt.serve.batcher import DEFAULT_MAX_WAIT_MS
from nmt.serve.schema import Limits

logger = logging.getLogger("nmt.serve")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    lim = Limits()
    p = argparse.ArgumentParser(prog="nmt-serve", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model-dir", action="append", required=True,
                   help="a trained model directory; repeat for several language pairs")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--checkpoint", default="best", help="best, latest, avg or a step number")
    p.add_argument("--max-batch", type=int, default=None,
                   help="most sentences decoded together (default: the model's decode batch size)")
    p.add_argument("--max-wait-ms", type=float, default=DEFAULT_MAX_WAIT_MS,
                   help="how long an idle worker waits after a request for others to start decoding with it")
    p.add_argument("--max-queue", type=int, default=1024,
                   help="sentences queued per model before requests get 503 with Retry-After")
    p.add_argument("--max-sentences", type=int, default=lim.max_sentences, help="sentences per request")
    p.add_argument("--max-beam-size", type=int, default=lim.max_beam_size)
    p.add_argument("--max-body-bytes", type=int, default=lim.max_body_bytes)
    p.add_argument("--timeout", type=float, default=lim.timeout_s, help="seconds per request")
    p.add_argument("--log-level", default="info")
    return p.parse_args(argv)


def build_app(args: argparse.Namespace):
    """The application over every --model-dir, each loaded once."""
    from nmt.serve.api import Service, create_app
    from nmt.translate import Translator
    translators = [Translator.from_dir(d, which=args.checkpoint) for d in args.model_dir]
    limits = Limits(max_body_bytes=args.max_body_bytes, max_sentences=args.max_sentences,
                    max_beam_size=args.max_beam_size, timeout_s=args.timeout)
    service = Service(translators, limits, args.max_batch, args.max_wait_ms, args.max_queue)
    return create_app(service)


def uvicorn_config(app, host: str, port: int, log_level: str = "info", max_queue: int = 1024):
    """uvicorn settings shared by the CLI and `background_server`: in-flight requests get as long as the
    per-request limit to finish at shutdown; connections beyond a bound get uvicorn's own 503."""
    import uvicorn
    timeout = app.state.service.limits.timeout_s
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=int(timeout) + 1,
                          limit_concurrency=4 * max_queue + 64, lifespan="on")


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of `nmt-serve` and scripts/serve.py."""
    import uvicorn
    from nmt.checkpoint import CheckpointError
    from nmt.config import ConfigError
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        app = build_app(args)
    except (CheckpointError, ConfigError, ValueError, OSError) as e:
        logger.error("%s", e)
        return 2
    uvicorn.Server(uvicorn_config(app, args.host, args.port, args.log_level, args.max_queue)).run()
    return 0


@contextlib.contextmanager
def background_server(app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> Iterator[str]:
    """Run `app` with uvicorn on a thread; yields its base URL (a free port when `port` is 0); stops it after."""
    import uvicorn
    server = uvicorn.Server(uvicorn_config(app, host, port, log_level))
    thread = threading.Thread(target=server.run, name="nmt-serve-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(30)
