"""`nmt-serve`: a translation service and web page over `nmt.translate.Translator` (FastAPI + uvicorn).

    nmt.serve.cli      the command line and the uvicorn server
    nmt.serve.api      the application: /translate, /attention, /health, /info, / (web page), /docs
    nmt.serve.batcher  dynamic batching of concurrent requests on one worker thread per model
    nmt.serve.schema   request parsing, limits and the errors that say what to change
"""
from nmt.serve.cli import main

__all__ = ["main"]
