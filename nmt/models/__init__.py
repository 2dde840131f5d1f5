"""Architectures behind one interface (`nmt.models.base.Seq2SeqModel`), built by name from a `ModelConfig`."""
from __future__ import annotations

from typing import Callable, Dict, Type

from nmt.models.base import DecoderState, Seq2SeqModel

ARCHITECTURES: Dict[str, Type[Seq2SeqModel]] = {}


def register(name: str) -> Callable[[Type[Seq2SeqModel]], Type[Seq2SeqModel]]:
    """Class decorator: `--arch NAME` builds this class."""
    def add(cls: Type[Seq2SeqModel]) -> Type[Seq2SeqModel]:
        ARCHITECTURES[name] = cls
        return cls
    return add


# The architectures register themselves on import (after `register` exists, which they use).
from nmt.models import transformer  # noqa: E402,F401  pylint: disable=wrong-import-position

__all__ = ["ARCHITECTURES", "DecoderState", "Seq2SeqModel", "register"]
