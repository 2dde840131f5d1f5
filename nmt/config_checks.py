"""The errors of a configuration, and the checks the config dataclasses of `nmt.config` make of their values: each
field as its declared type (`typed`), and the first of a list of (ok, message) pairs that fails (`check`)."""
from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Tuple


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the flag or field."""


class SettingsClash(ConfigError):
    """Values that cannot work together (of two sections, or a language pair): judged in a --config file with flags.
    `keys`: the config keys whose values clash, as its kind or the check that raised it (`check`) names them (a
    --config file is named in its message only where it gives one of them: `nmt.cli.config_from_args`); () if none."""
    keys: Tuple[str, ...] = ()


class TooFewKept(SettingsClash):
    """An --average-last over the --keep-last checkpoints kept: a resume names which of the two is the run's own
    (`nmt.config_resume.run_clash`)."""
    keys = ("train.average_last", "train.keep_last")


_KINDS = {"int": ("an integer", int), "float": ("a number", float), "str": ("a string", os.fspath),
          "bool": ("true or false", bool)}


def typed(config) -> None:
    """Each field of the config dataclass `config` as its type, numpy's numbers and paths taken (a sweep over
    np.arange, a Path); a ConfigError naming the field for another type ("100" for an int), which would fail deep in
    training. (Flags come typed by argparse, and a --config file's values by `jsonio.check_field_types`.)"""
    for f in dataclasses.fields(config):
        value, kind = getattr(config, f.name), str(f.type).removeprefix("Optional[").removesuffix("]")
        if value is None and str(f.type).startswith("Optional["):
            continue
        number = not isinstance(value, bool) and isinstance(value, numbers.Integral if kind == "int" else numbers.Real)
        ok = {"int": number, "float": number, "str": isinstance(value, (str, os.PathLike)),
              "bool": isinstance(value, bool) or type(value).__name__ == "bool_"}[kind]
        if not ok:
            raise ConfigError(f"{type(config).__name__}.{f.name} must be {_KINDS[kind][0]}, got {value!r} "
                              f"({type(value).__name__})")
        setattr(config, f.name, _KINDS[kind][1](value))


def check(checks, error=ConfigError, keys: Tuple[str, ...] = ()) -> None:
    """`error` (a ConfigError) with the message of the first (ok, message) pair that is not ok; a SettingsClash's
    `keys`, where given: the config keys whose values the checks compare."""
    for ok, message in checks:
        if not ok:
            e = error(message)
            if keys:
                e.keys = tuple(keys)
            raise e
