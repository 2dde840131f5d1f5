"""Building the service's application in tests, with chosen limits and batching settings, and serving it with uvicorn
on a thread."""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

from nmt.serve.cli import uvicorn_config


def make_app(translator, **kw):
    """An application over `translator`; keyword arguments are Limits fields (timeout_s, max_sentences, ...) or
    batcher settings (max_batch, max_wait_ms, max_queue)."""
    from nmt.serve.api import Service, create_app
    from nmt.serve.schema import Limits
    batch = {k: kw.pop(k) for k in ("max_batch", "max_wait_ms", "max_queue") if k in kw}
    return create_app(Service([translator], Limits(**kw), **batch))


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


def wait_until(predicate, seconds: float, what: str):
    """`predicate()`'s first true result, polled every 20 ms; AssertionError naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")
