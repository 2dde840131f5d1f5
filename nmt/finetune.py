"""Fine-tuning: a new run that starts from the parameters of a trained model (`nmt-train --init-from DIR`), as
Sockeye's `--params`, fairseq's `--restore-file --reset-optimizer` and Marian's `--pretrained-model` do. The run
keeps that model's settings, languages and SentencePiece models (the parameters are indexed by its pieces) and
trains on its own data with a fresh optimizer, learning-rate schedule and step count. The command line checks all
of it before training starts.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Dict, Tuple

from nmt import checkpoint as ckpt
from nmt.atomic import atomic_copy
from nmt.commands import shell_word
from nmt.config import ARCH_DEFAULTS, Config, ConfigError
from nmt.tokenizer import tokenizer_names

logger = logging.getLogger("nmt.finetune")

# What a fine-tuning run takes from its model besides the model section: the languages and the tokenizers' settings.
INHERITED_DATA = ("src_lang", "tgt_lang", "vocab_size", "spm_model_type")


def tunable(arch: str) -> Tuple[str, ...]:
    """The model settings a fine-tuning run of `arch` may change (its `Seq2SeqModel.tunable_fields`); not given, they
    are the model's. (The one look at the architectures, which import MXNet, as training does anyway.)"""
    from nmt.models import ARCHITECTURES
    return ARCHITECTURES[arch].tunable_fields if arch in ARCHITECTURES else ()


def new_run(resume: bool, init, caller: str) -> bool:
    """Whether `caller`'s run is a new one, neither resumed nor fine-tuned (its model settings are checked as a new
    run's); a ConfigError for both, as nmt-train refuses --resume with --init-from: the resume took `init`'s
    SentencePiece models over its own, and its checkpoints were refused."""
    if resume and init is not None:
        raise ConfigError(f"{caller}: resume=True continues the run in train.model_dir and init starts a new run from "
                          "a trained model (nmt-train's --resume and --init-from): give one of them")
    return not resume and init is None


def init_params(spec) -> Path:
    """The parameter file `--init-from` names: a model directory's best parameters, or a params file in one
    (params.avg, params.00005040 ...), checked against its checkpoint's manifest; absolute, as state.json records it."""
    from nmt.dirlock import left_aside
    path = Path(spec).absolute()
    model_dir = path if path.is_dir() else path.parent
    if left_aside(model_dir):   # its files are in .overwritten
        raise ConfigError(f"--init-from {spec}: {left_aside(model_dir)}")
    if not path.exists():
        raise ConfigError(f"--init-from {spec}: no such model directory or parameter file")
    if not (model_dir / ckpt.CONFIG).is_file():
        raise ConfigError(f"--init-from {spec}: {model_dir / ckpt.CONFIG} not found; give a model directory written "
                          "by nmt-train, or a params file in one (e.g. DIR/params.avg)")
    use = lambda s: f"--init-from {shell_word(model_dir / ckpt.params_file(s))}"   # noqa: E731  (no --checkpoint)
    if path.is_dir():
        params = ckpt.params_path(model_dir, "best", use=use)
    elif ckpt.params_step(path.name) is None and path.name not in (ckpt.PARAMS_BEST, ckpt.PARAMS_AVG):
        raise ConfigError(f"--init-from {spec}: not a parameter file (params.best, params.avg or params.<step>)")
    else:
        params = path
        ckpt.verify_params(params, use)
    return params


def for_init(cfg: Config, spec) -> Tuple[Config, Path]:
    """`train(cfg, init=spec)`, as `--init-from`: the parameter file `spec` names (a model directory or a params file
    in one) and `cfg` with that model's settings, languages and vocabulary size, but for what `cfg` gives, taken as a
    command line's flags (`init_config`): the values of the dict it was made from (`Config.given`) and those that are
    not its architecture's defaults."""
    from nmt.config_resume import given_by
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError(f"train: init must be a model directory or parameter file path, got {type(spec).__name__}")
    params = init_params(spec)
    return init_config(cfg, given_by(cfg), params), params


def kept_settings(d: Dict[str, Dict[str, Any]], init_from: Path, given: Dict[str, str]) -> None:
    """The languages and architecture of the model --init-from names, which a fine-tuning run keeps
    (`init_config`), in `d` where it gives none: the default --model-dir is named after them, and the
    checks of the settings together see them; a ConfigError where the command line gives another (`given`: key ->
    flag), before a check of the pair meets it. (A path that is no model directory is named by `init_params` later.)"""
    config = (init_from if init_from.is_dir() else init_from.parent) / ckpt.CONFIG
    theirs = Config.load(config).to_dict() if config.is_file() else {}   # (checked: a null section is named)
    for section, name in (("data", "src_lang"), ("data", "tgt_lang"), ("model", "arch")):
        if name in theirs.get(section, {}):
            mine = d.setdefault(section, {}).setdefault(name, theirs[section][name])
            if f"{section}.{name}" in given and mine != theirs[section][name]:
                raise not_kept(given[f"{section}.{name}"], mine, init_from, f"{section}.{name}",
                               theirs[section][name], config)


def not_kept(label: str, value: Any, init_from: Path, key: str, old: Any, source: Path) -> ConfigError:
    """The error of a fine-tuning run given (as `label`) another `value` of a `key` its model keeps."""
    file, _, in_file = label.rpartition(": ")   # a --config file's key is "FILE: section.key"; else a flag, or the
    shown = f"{label} ({key} {json.dumps(value)})" if isinstance(value, bool) and label.startswith("--") else \
        f"{label} = {json.dumps(value)}" if file else f"{label} {json.dumps(value)}"   # field of a Python caller's
    return ConfigError(f"{shown}: --init-from {init_from} has {key} {json.dumps(old)} ({source}); a fine-tuning run "
                       "keeps its model's settings, languages and vocabularies: " +
                       (f"remove {in_file} from {file}" if file else f"drop {label}"))


def init_config(cfg: Config, given: Dict[str, str], params: Path) -> Config:
    """`cfg` with the model section, languages and tokenizer settings of the model `params` belongs to, but for the
    `tunable` settings the command line gives (`given`: key -> flag); a ConfigError naming the flag where it asks
    for another value of any other."""
    source = params.parent / ckpt.CONFIG
    if params.parent.resolve() == Path(cfg.train.model_dir).resolve():
        named = "" if "train.model_dir" in given else (" (the default, named after the data, languages and "
                                                        "architecture, as that model's was)")
        raise ConfigError(f"--init-from {params.parent} is the --model-dir of this run{named}: fine-tuning writes a "
                          "new model directory (give another --model-dir; --resume continues that run instead)")
    theirs, mine = Config.load(source).to_dict(), cfg.to_dict()
    for section, name in [("model", k) for k in theirs["model"]] + [("data", k) for k in INHERITED_DATA]:
        key, old = f"{section}.{name}", theirs[section][name]
        if key in given and section == "model" and name in tunable(theirs["model"]["arch"]):
            continue
        if key in given and mine[section][name] != old:
            raise not_kept(given[key], mine[section][name], params, key, old, source)
        mine[section][name] = old
    for section, defaults in ARCH_DEFAULTS.get(theirs["model"]["arch"], {}).items():   # not the default arch's
        for name in defaults:
            if section != "model" and f"{section}.{name}" not in given:
                del mine[section][name]   # from_dict fills in the model's architecture's default
    return Config.from_dict(mine, source=str(source))


def copy_tokenizers(params: Path, cfg: Config, model_dir: Path) -> None:
    """The SentencePiece models of the model `params` belongs to, copied into `model_dir`, where the run's data
    reuses them (`nmt.data.build_tokenizers`): the data is tokenized into the pieces the parameters are indexed by."""
    for name in sorted(set(tokenizer_names(cfg.data.src_lang, cfg.data.tgt_lang, cfg.model.shared_vocab))):
        for file in (name, Path(name).with_suffix(".vocab").name):
            if (params.parent / file).is_file():
                atomic_copy(params.parent / file, Path(model_dir) / file)


def start_from(net, params: Path, ctxs) -> None:
    """Load the parameters `params` into the freshly built model `net` (of the same settings and vocabularies)."""
    ckpt.load_parameters(net, params, ctxs, params.parent / ckpt.CONFIG)
    logger.info("fine-tuning: starting from %s with a fresh optimizer and learning-rate schedule", params)
