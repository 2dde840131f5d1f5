"""`nmt-serve`: a translation service and web page over `nmt.translate.Translator` (FastAPI + uvicorn).

    nmt.serve.cli      the command line and the uvicorn server
    nmt.serve.api      the application: /translate, /attention, /health, /info, / (web page), /docs
    nmt.serve.batcher  dynamic batching of concurrent requests on one worker thread per model
    nmt.serve.schema   request parsing, limits and the errors that say what to change
"""
from typing import List, Optional

__all__ = ["main"]


def main(argv: Optional[List[str]] = None) -> int:
    """`nmt-serve` (`nmt.serve.cli.main`), imported as it runs: importing the package imports none of its modules, so
    that `python -m nmt.serve.cli` runs the command as `python -m nmt.serve` does (runpy warned that the module it was
    to run was imported already, then ran a second copy of it that did nothing)."""
    from nmt.serve.cli import main as serve
    return serve(argv)
