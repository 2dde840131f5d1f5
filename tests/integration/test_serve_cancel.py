"""A request nobody waits for any more stops using the model: over its time limit (504) or when its client
disconnects, its sentences leave the running search at the next step instead of being translated to the end."""
from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx

from tests.integration.serve_app import background_server, make_app, wait_until

BEAM = 16
MAX_BATCH = 4


def model_stats(c: httpx.Client) -> dict:
    return c.get("/health").json()["models"]["ko-en"]


def big_request(serve_sentences) -> dict:
    """Some seconds of work for the tiny model, four sentences at a time (`MAX_BATCH`): 256 sentences at beam 16."""
    return {"text": (serve_sentences * 256)[:256], "beam_size": BEAM}


def test_a_request_over_its_time_limit_stops_decoding(translator, serve_sentences):
    app = make_app(translator, timeout_s=0.3, max_wait_ms=0, max_batch=MAX_BATCH)
    with background_server(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/translate", json=big_request(serve_sentences))
        assert r.status_code == 504, r.text[:300]
        stats = wait_until(lambda: (lambda s: s if s["queued"] == 0 else None)(model_stats(c)), 30,
                           "the queue to empty")
        steps = stats["steps"]
        assert stats["sentences"] < 256, "the request was translated to the end after its 504"
        time.sleep(0.3)
        assert model_stats(c)["steps"] == steps, "the worker went on stepping"
        assert c.post("/translate", json={"text": serve_sentences[:1]}).status_code == 200


def test_a_request_whose_client_left_stops_decoding(translator, serve_sentences):
    app = make_app(translator, max_wait_ms=0, max_batch=MAX_BATCH)
    with background_server(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        body = json.dumps(big_request(serve_sentences)).encode()
        host, port = urlsplit(url).hostname, urlsplit(url).port
        with socket.create_connection((host, port)) as sock:
            sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            wait_until(lambda: model_stats(c)["steps"] > 2, 30, "the request to reach the model")
        stats = wait_until(lambda: (lambda s: s if s["queued"] == 0 else None)(model_stats(c)), 60,
                           "the queue to empty")
        assert stats["sentences"] < 256, "the request was translated to the end after its client left"
        assert c.post("/translate", json={"text": serve_sentences[:1]}).status_code == 200
