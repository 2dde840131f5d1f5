"""Architectures behind one interface (`nmt.models.base.Seq2SeqModel`), built by name from a `ModelConfig`."""
from __future__ import annotations

from typing import Callable, Dict, Type

from nmt import mxnet_builds_problem
from nmt.config import ARCH_DEFAULTS, ConfigError

if _problem := mxnet_builds_problem():   # (before MXNet is imported: which build's files it reads is anyone's guess)
    raise ImportError(_problem)

from nmt.models.base import DecoderState, Seq2SeqModel  # noqa: E402

ARCHITECTURES: Dict[str, Type[Seq2SeqModel]] = {}


def register(name: str) -> Callable[[Type[Seq2SeqModel]], Type[Seq2SeqModel]]:
    """Class decorator: `--arch NAME` builds this class."""
    def add(cls: Type[Seq2SeqModel]) -> Type[Seq2SeqModel]:
        ARCHITECTURES[name] = cls
        return cls
    return add


def build_model(cfg, src_vocab_size: int, tgt_vocab_size: int) -> Seq2SeqModel:
    """The uninitialized model of `cfg.arch` for these vocabulary sizes; ConfigError naming the flag when `cfg`
    cannot build one. Initialize it with e.g. `model.initialize(mx.init.Xavier(), ctx=ctx)`."""
    known = ", ".join(sorted(ARCHITECTURES))
    if cfg.arch in ARCH_DEFAULTS and cfg.arch not in ARCHITECTURES:   # named in config.py, its class never imported
        raise ConfigError(f"--arch {cfg.arch}: no model class is registered under that name (registered: {known}): "
                          f"decorate it with @register({cfg.arch!r}) and import its module in nmt/models/__init__.py "
                          "(docs/architecture.md, To add an architecture)")
    if cfg.arch not in ARCHITECTURES:
        raise ConfigError(f"--arch must be one of {known} (got {cfg.arch!r})")
    if cfg.arch not in ARCH_DEFAULTS:   # registered, but --arch does not offer it: a --config file's would build it
        raise ConfigError(f"--arch {cfg.arch}: its class is registered, but nmt/config.py's ARCH_DEFAULTS has no entry "
                          "for it, which --arch offers: add one ({} if it changes no shared default; "
                          "docs/architecture.md, To add an architecture)")
    return ARCHITECTURES[cfg.arch](cfg, src_vocab_size, tgt_vocab_size)


# The architectures register themselves on import (after `register` exists, which they use).
from nmt.models import lstm, transformer  # noqa: E402,F401  pylint: disable=wrong-import-position

__all__ = ["ARCHITECTURES", "DecoderState", "Seq2SeqModel", "build_model", "register"]
