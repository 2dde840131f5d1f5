"""On `--resume`: the configuration a resumed run trains with, its saved settings with what this command line may
change (`resumed_config`), and the keys of each invocation rather than of the training (`PER_INVOCATION`). No
MXNet here, but for the architectures' lists behind the hint of a refused model setting (`_tuned`)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from nmt.commands import shell_word
from nmt.config import CORPUS_FILES, Config, ConfigError, DecodeConfig, SettingsClash
from nmt.config_checks import TooFewKept

_CORPORA_PLACE = ("data.data_dir", "data.cache_dir")
# Keys a resumed run takes from its own command line, given or not: they describe this machine and this invocation
# (devices, this run's time limit, the progress bar), not the training; where the corpora are, only when given.
PER_INVOCATION = frozenset({"train.model_dir", "train.gpus", "train.cpu_devices", "train.kvstore", "train.amp",
                            "train.max_seconds", "train.progress", "train.tensorboard", *_CORPORA_PLACE})

_FIXED_KEYS = ("train.seed", "train.valid_metric", "optim.optimizer")
# Corpus files a resumed run may find elsewhere (moved, compressed): its training, dev and test pairs' checksums are
# compared with the run's as it resumes (`nmt.data.check_same_pairs`). Only files the run has: a recipe's corpora or a
# held-out dev set given as files is other data, and other test pairs' scores would mix two sets under one name.
_MOVABLE = frozenset(f"data.{side}_{end}" for side in ("train", "dev") for end in ("src", "tgt"))
_TEST_FILES = ("data.test_src", "data.test_tgt")
# How the dev set is translated for a score that chooses the best checkpoint (all but perplexity), each new one
# compared with the best's: the sentences, the beam, and every decoding setting, one added later too, but those that
# change no translation (DecodeConfig.UNSCORED), nmt-translate's beam and, at --valid-beam 1, the length penalty.
_DEV_TRANSLATION = ("train.valid_max_sentences", "train.valid_beam")


def rank0_run(model_dir: Path) -> str:
    """What --init-from advice adds where the run it names (in `model_dir`) is rank 0's, not on this machine (a
    distributed worker's): what to copy where first, as a fine-tuning job reads --init-from on every machine."""
    where = shell_word(model_dir)
    return (f"(rank 0's: its run is on rank 0's machine, not this one, and a fine-tuning job reads the model of "
            f"--init-from at the same path on every machine: copy the model directory {where} from rank 0's machine "
            f"to {where} on this one first)")


def _fixed_on_resume(key: str, saved: Config) -> str:
    """Why a run cannot change `key` when it resumes ("" if it can): its model and data (tokenizers, pairs,
    batches), the seed of its batches, the dev score that chooses its best checkpoint and how its translations are
    made, or the optimizer its saved states belong to (`saved`: the run's configuration)."""
    section, name = key.split(".", 1)
    if key in PER_INVOCATION or key in (*_MOVABLE, *_TEST_FILES) and getattr(saved.data, name):
        return ""   # (moved files: their pairs are compared with the run's; files it has not, a recipe's, its data)
    if section in ("model", "data") or key in _FIXED_KEYS:
        return "the model, the data, the seed and the --valid-metric cannot change within a run"
    decoded = section == "decode" and name not in (*DecodeConfig.UNSCORED, "beam_size") and (
        name != "length_penalty_alpha" or saved.train.valid_beam > 1)
    translated = saved.valid_metric != "ppl" and (key in _DEV_TRANSLATION or decoded)
    return ("the dev translations whose --valid-metric chooses the best checkpoint are made with it, and each new "
            "score is compared with the best's") if translated else ""


def _unchanged(key: str, value, old, saved: Config) -> bool:
    """Whether this command line's `value` of `key` is the run's `old` (`saved`: its configuration): equal, a
    --valid-metric unset (None: the run's own) or the one the run's unset one stands for, or an --upsample that
    repeats the same corpora as many times (in another order or spelling; once is not repeated)."""
    if key == "train.valid_metric":
        return value in (None, saved.valid_metric)
    if value == old or key != "data.upsample":
        return value == old
    from nmt.recipes import RECIPES, parse_upsample
    recipe = RECIPES.get(saved.data.recipe or "")
    repeated = [{name: k for name, k in parse_upsample(spec, recipe).items() if k > 1} if recipe else spec
                for spec in (value, old)]
    return repeated[0] == repeated[1]


def check_test_files(saved: Config, cfg: Config, test_sum: str, source: str) -> None:
    """ConfigError for test files given elsewhere than the run (`saved`, read from `source`) has them when it recorded
    no test pairs to compare them with (`test_sum` ""): it began before nmt recorded a run's test pairs."""
    moved = [f"--{k.replace('_', '-')}" for k in ("test_src", "test_tgt")
             if getattr(cfg.data, k) != getattr(saved.data, k)]
    if moved and saved.data.test_src and not test_sum:
        raise ConfigError(f"--resume: {' and '.join(moved)} differ from the run's ({source}), which began before nmt "
                          "recorded a run's test pairs, so nothing tells whether they are the same: give its test "
                          "files where it has them (put them back there)")


def _resumed_from(model_dir: Path) -> Dict[str, Any]:
    """The manifest of the checkpoint a resume of the run in `model_dir` starts from (its newest intact one: "step",
    "state"), or {} where none is."""
    from nmt import manifest
    try:
        return manifest.newest_intact(model_dir)[0]
    except (manifest.CheckpointError, OSError):
        return {}


def _test_pairs_recorded(model_dir: Path) -> bool:
    """Whether the run in `model_dir` recorded its test pairs' checksum (`TrainState.test_sum`)."""
    return bool(_resumed_from(model_dir).get("state", {}).get("test_sum"))


def _latest_params(model_dir: Path, at: Optional[int] = None) -> str:
    """--init-from's word for where the run in `model_dir` stands: the parameter file of the checkpoint a resume
    starts from (the directory alone would be its params.best, maybe many updates before), else the directory; with
    `at`, that checkpoint's step, the file on rank 0's machine, not this one, and said so (a distributed worker's)."""
    from nmt.checkpoint import params_file
    step = _resumed_from(model_dir).get("step") if at is None else at
    word = shell_word(model_dir / params_file(step) if isinstance(step, int) else model_dir)
    return word if at is None else f"{word} {rank0_run(model_dir)}"


def _tuned(key: str, source: str, arch: str, at: Optional[int] = None) -> str:
    """How to go on from the run (of `arch`) with another `key` where a fine-tune may change it: --init-from (into a
    new --model-dir), which keeps the model, its languages and its vocabularies (`at`: as `_latest_params`)."""
    from nmt.finetune import INHERITED_DATA, tunable
    section, name = key.split(".", 1)
    if section == "model" and name not in tunable(arch) or section == "data" and name in INHERITED_DATA:
        return ""
    return (" (to go on from this run's parameters, fine-tune with --init-from "
            f"{_latest_params(Path(source).parent, at)}, giving its data and training flags again: --init-from takes "
            "a model's own settings, not its data, batch or schedule)")


def refused_change(key: str, label: str, value, saved: Config, source: str, at: Optional[int] = None) -> str:
    """The error of a resumed run given `value` for `key` (as `label`: a flag, or a --config file's key) where it
    cannot change (`_fixed_on_resume`); "" where it can, or `value` is the run's own (`saved`, read from `source`).
    `at`: the step of the checkpoint the run resumes from where `source` is on rank 0's machine, not this one."""
    section, name = key.split(".", 1)
    old = saved.valid_metric if key == "train.valid_metric" else saved.to_dict()[section][name]   # (None: whose)
    fixed = value != old and _fixed_on_resume(key, saved)
    if not fixed:
        return ""
    shown = (f"{label} ({name} {json.dumps(value)})" if isinstance(value, bool) else   # (--no-X false)
             f"{label} {json.dumps(value)}") if label.startswith("--") else f"{label} = {json.dumps(value)}"
    if key == "optim.optimizer":
        why = (f"its saved optimizer states belong to the {old} optimizer: drop it, or to switch optimizers fine-tune "
               f"into a new --model-dir with --init-from {_latest_params(Path(source).parent, at)}")
    else:   # (the advice reads the checkpoint's manifest: only where it is given)
        why = f"{fixed}: drop it, or train into a new --model-dir{_tuned(key, source, saved.model.arch, at)}"
    return f"--resume: {shown} differs from {json.dumps(old)}, which this run was trained with ({source}); {why}"


def run_clash(clash: SettingsClash, saved: Config, train: Dict[str, Any], given: Optional[Dict[str, str]],
              source: str) -> str:
    """A SettingsClash's message on --resume, with what lifts it where it is --average-last over the checkpoints kept
    (`TooFewKept`) and one of the two is the run's (`saved`, read from `source`), not given by this command (`given`;
    None: every key is), and the other is (`train`: the train section, this command's over the run's)."""
    if not isinstance(clash, TooFewKept) or given is None:
        return str(clash)   # (another clash, checked first: --batch-size under --accum-steps)
    n, keep = train["average_last"], train["keep_last"]
    lower = "" if keep < 2 else " or 2" if keep == 2 else f" or 2 to {keep}"
    if "train.average_last" not in given and n == saved.train.average_last:
        return (f"{clash}; --average-last {n} is this run's saved setting ({source}), not this command's: "
                f"--average-last 0 (no params.avg){lower} lifts it")
    if "train.keep_last" not in given and keep == saved.train.keep_last:
        return (f"{clash}; {keep} is this run's saved --keep-last ({source}), not this command's: give --keep-last "
                f"{n} or more with --average-last {n}" + (f", or --average-last{lower[3:]}" if lower else ""))
    return str(clash)


def refused_batch_kind(asked: Dict[str, Any], given: Dict[str, str], saved: Config, path) -> None:
    """On --resume: a ConfigError for batches of the other kind than the run's (`saved`), asked by a flag, a
    --config file's key or a Python caller's (`asked`: the data section they give; `given`: how), as "differs from
    null" said; every batch key given is to be dropped (a run's config.json as --config holds both)."""
    name = "batch_tokens" if asked.get("batch_tokens") else "batch_size"
    tokens, label = saved.data.batch_tokens, given.get(f"data.{name}")
    if label is None or bool(asked.get("batch_tokens")) == bool(tokens):
        return
    kind, trained = ("tokens", f"--batch-size {saved.data.batch_size}") if not tokens else (
        "sentences", f"--batch-tokens {tokens}")
    shown = f"{label} {asked[name]}" if label.startswith("--") else f"{label} = {asked[name]}"
    keys = [given[k] for k in ("data.batch_size", "data.batch_tokens")   # (from where `label` is: a file, flags)
            if k in given and given[k].startswith("--") == label.startswith("--")]
    drop = " and ".join(k.split(": ")[-1] for k in keys) + (f" from {label.rsplit(': ', 1)[0]}" if ": " in label
                                                           else "")
    raise ConfigError(f"--resume: {shown} asks for batches of {kind}, and this run was trained with {trained} "
                      f"({path}); the data cannot change within a run: drop {drop}, or train into a new --model-dir")


def resumed_config(saved: Config, cfg: Config, given: Optional[Dict[str, str]], source: str,
                   at: Optional[int] = None) -> Tuple[Config, List[str]]:
    """The configuration a resumed run trains with: the run's own (`saved`, read from `source`), with this
    invocation's per-invocation keys and the keys it gives (`given`: key -> how the user gave it, a flag or a file's
    key; None: every key of `cfg`, named as `cfg.labels` has them, else as keys) taken from `cfg`. A given model or
    data key that differs is a ConfigError naming it; the other differences come back as lines "key: old -> new" (a
    new --max-steps, --lr ...). `at`: where `source` is on rank 0's machine, not this one, the step of the checkpoint
    the run resumes from (its advice names the file there)."""
    merged, changes = saved.to_dict(), []
    if given is not None:   # (nmt-train's flags were checked so before they met the run's settings)
        refused_batch_kind({k: getattr(cfg.data, k) for k in ("batch_size", "batch_tokens") if f"data.{k}" in given},
                           given, saved, source)
    for section, values in cfg.to_dict().items():
        for name, value in values.items():
            key, old = f"{section}.{name}", merged[section][name]
            if _unchanged(key, value, old, saved) or not (key in PER_INVOCATION or given is None or key in given) or (
                    key in _CORPORA_PLACE and given is not None and key not in given):
                continue
            label = key if given is None else given.get(key, key)
            refused = refused_change(key, label, value, saved, source, at)
            if refused:
                raise ConfigError(refused)
            merged[section][name] = value
            if key not in PER_INVOCATION:   # (nmt-train's run: in its flags' words, as its --dry-run said them)
                shown = cfg.labels.get(key, label) if given is None else label
                changes.append(f"{shown}: {json.dumps(old)} -> {json.dumps(value)}")
    for name in CORPUS_FILES:   # read again from where the run recorded them (the error said only "not found")
        path = merged["data"][name]
        if path and not os.path.exists(path):
            flag = f"--{name.replace('_', '-')}"
            moves = not name.startswith("test") or _test_pairs_recorded(Path(source).parent)   # (check_test_files)
            raise ConfigError(f"--resume: {flag} {path}, recorded in {source}, is not there any more: a run reads "
                              "its files again when it resumes: put them back there" + (
                                  f", or give where they are now ({flag} ...; the same pairs: their checksums are "
                                  "compared with the run's)" if moves else " (the run began before nmt recorded a "
                                  "run's test pairs: nothing would tell moved ones the same)"))
    try:
        return Config.from_dict(merged, source=source), changes
    except SettingsClash as e:   # (Python's train(cfg, resume=True): nmt-train's flags met the run's before)
        raise type(e)(run_clash(e, saved, merged["train"], given, source)) from None


def average_advice(model_dir: Path) -> str:
    """How to make params.avg: a resume with --average-last N, and --max-steps at the run's step if it stopped by
    --max-seconds (PER_INVOCATION), a signal or a kill; the limits a resume keeps end it without an update."""
    from nmt.checkpoint import CheckpointError, TrainState
    from nmt.signals import INTERRUPTS
    try:
        state = TrainState.load(model_dir)
    except CheckpointError:
        state = TrainState(stopped="max_steps")
    run = f"; average the last N checkpoints into it with `nmt-train --model-dir {shell_word(model_dir)} --resume " \
        "--average-last N"
    return f"{run}`" if state.stopped not in (*INTERRUPTS, "max_seconds", "") else (
        f"{run} --max-steps {state.step}` (it stopped by {state.stopped or 'a kill'} at step {state.step}: without "
        "--max-steps the resume would train on; it then becomes the run's limit: a later resume gives a higher one)")


def given_by(cfg: Config) -> Dict[str, str]:
    """The keys a Config from Python gives, as a command line's flags would (key -> key): those of the dict it was
    made from (`Config.given`) and those not at its architecture's defaults (a value set by hand)."""
    defaults, mine = Config.for_arch(cfg.model.arch).to_dict(), cfg.to_dict()
    defaults["model"]["arch"] = Config().model.arch   # a config of the Transformer asks for one
    return {f"{s}.{k}": f"{s}.{k}" for s, values in mine.items() for k, v in values.items()
            if v != defaults[s][k] or f"{s}.{k}" in cfg.given}


def record_mirror(cfg: Config, resume: bool) -> None:
    """$NMT_DATA_DIR into a new run's `data.data_dir` where it gives none, as --data-dir is (its evaluation and
    --resume read the corpora from there); a CorpusError naming the variable when it names no directory."""
    from nmt.recipes import resolve_data_dir
    if not resume and cfg.data.recipe and cfg.data.data_dir is None:
        mirror = resolve_data_dir(None)
        cfg.data.data_dir = None if mirror is None else str(mirror.resolve())


def as_command_line(cfg: Config, resume: bool) -> Config:
    """`train(cfg, resume)` (`cfg` checked by `preflight.checked_config`) as nmt-train runs its flags: $NMT_DATA_DIR
    recorded (`record_mirror`); on `resume` the run's own configuration (its config.json) with what `cfg` gives
    (`given_by`), as `--resume` with flags, where a given model or data key that differs is refused by name."""
    record_mirror(cfg, resume)
    path = Path(cfg.train.model_dir) / "config.json"
    if not resume or not path.is_file():   # (nothing to resume: the run says so)
        return cfg
    return resumed_config(Config.load(path), cfg, given_by(cfg), str(path))[0]
