"""Building the service's application in tests, with chosen limits and batching settings."""
from __future__ import annotations


def make_app(translator, **kw):
    """An application over `translator`; keyword arguments are Limits fields (timeout_s, max_sentences, ...) or
    batcher settings (max_batch, max_wait_ms, max_queue)."""
    from nmt.serve.api import Service, create_app
    from nmt.serve.schema import Limits
    batch = {k: kw.pop(k) for k in ("max_batch", "max_wait_ms", "max_queue") if k in kw}
    return create_app(Service([translator], Limits(**kw), **batch))
