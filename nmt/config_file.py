"""`nmt-train --config FILE`: a JSON file of config sections and keys, read as the command line's base (its flags
override it). Its values are checked where they stand, over the defaults or, on --resume, over the run's own
settings; the keys of the machine it was written on (its devices) are not taken. No MXNet here."""
from __future__ import annotations

import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from nmt import jsonio
from nmt.checkpoint import CONFIG, EXPORT, LOG, PARAMS_BEST, STATE
from nmt.commands import shell_word
from nmt.config import ARCH_DEFAULTS, CORPUS_FILES, Config, ConfigError, SettingsClash, TrainConfig

# A --config file's keys of the machine it was written on: devices come from each command line, as on --resume.
DEVICE_KEYS = ("gpus", "cpu_devices", "kvstore", "amp")


def read_config_file(path, base: Optional[Config] = None, check: bool = True) -> Dict[str, Dict[str, Any]]:
    """The sections of the --config file `path` (over `base`'s settings when given), checked unless not `check`:
    a ConfigError names the file and key; device keys are dropped (said when `check`: a first look is quiet)."""
    try:
        is_file = Path(path).is_file()
    except OSError:   # (a name too long: JSON text given as the file, most likely)
        is_file = False
    if not is_file and str(path).lstrip().startswith("{"):
        raise ConfigError("--config takes the name of a JSON file, not JSON text: write the settings to a file")
    if not is_file:   # (a pipe is read twice: to find the run's directory, then its settings)
        raise ConfigError(f"--config {path}: " + ("a directory, not a file" if Path(path).is_dir() else
                                                  "not a file (a pipe?): give it as a file" if Path(path).exists()
                                                  else "file not found"))
    d = jsonio.read_object(path, ConfigError)
    for section, values in d.items():   # checked also when not `check`: the command line reads its sections
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: section {section!r} must be a JSON object, got {json.dumps(values)}")
    if not isinstance(d.get("train", {}).get("model_dir", ""), str):
        raise ConfigError(f"{path}: train.model_dir must be a string, got {json.dumps(d['train']['model_dir'])}")
    for name in CORPUS_FILES:   # (as the flags say it: read from ./-, it was "file not found")
        if str(d.get("data", {}).get(name)).strip() == "-":
            raise ConfigError(f'{path}: data.{name} is "-" (standard input), which cannot be a corpus file: training '
                              "reads its files more than once; give the file's path")
    if base is not None:   # --resume: over the run's settings
        d = {k: {**v, **d.get(k, {})} for k, v in {**d, **base.to_dict()}.items()}
    if check:
        with contextlib.suppress(SettingsClash):   # (values that clash, a flag's may mend: judged merged with them)
            Config.from_dict(d, source=str(path), file=True)
    _drop_devices(d, str(path), check)
    return d


def _drop_devices(d: Dict[str, Dict[str, Any]], config: str, say: bool) -> None:
    taken = {k: d["train"].pop(k) for k in DEVICE_KEYS if isinstance(d.get("train"), dict) and k in d["train"]}
    said = [f"train.{k} = {json.dumps(v)}" for k, v in taken.items() if v != getattr(TrainConfig, k)]
    if said and say:
        logging.getLogger("nmt").warning("--config %s: %s not taken: the devices are this command line's (--gpus, "
                                         "--cpu-devices, --kvstore, --amp)", config, ", ".join(said))


def _run_files(home: Path) -> bool:
    """Whether the directory `home` holds a run (or an export)."""
    return any((home / name).exists() for name in (STATE, LOG, PARAMS_BEST, EXPORT))


def _run_settings(config: Path) -> bool:
    """Whether the --config file `config` is the config.json of a model directory (a run's or an export's)."""
    return config.name == CONFIG and _run_files(config.resolve().parent)


def warn_time_limit(config: str, d: Dict[str, Dict[str, Any]], flags: Dict[str, Any]) -> None:
    """Warn when a run's config.json as --config brings that run's time limits (train.max_seconds, of one
    invocation; train.time_budget, of its training) to this one without their flags: kept in the file, they would
    stop the new run as early (the quick start's 1800 s in a run of all the data)."""
    for name, flag in (("max_seconds", "--max-seconds"), ("time_budget", "--time-budget")):
        limit = d.get("train", {}).get(name)
        if limit and f"train.{name}" not in flags and _run_settings(Path(config)):
            logging.getLogger("nmt").warning("--config %s: train.%s = %s taken from that run: this run stops after "
                                             "%s s too (%s 0: no time limit)", config, name, limit, limit, flag)


def warn_fine_tuned(config: str, init_from) -> None:
    """Warn when a new run's --config file is the config.json of a run fine-tuned from a model (its state.json's
    init_from) and no --init-from is given: the settings do not hold it, and the run would start from scratch."""
    if init_from is not None or not _run_settings(Path(config)):
        return
    try:
        parent = jsonio.read_object(Path(config).resolve().parent / STATE, ConfigError).get("init_from")
    except ConfigError:   # (no state: an export's, or a damaged one)
        return
    if isinstance(parent, str) and parent:
        logging.getLogger("nmt").warning("--config %s: that run was fine-tuned from %s, which its settings do not "
                                         "hold: this run starts from scratch (new tokenizers and parameters) unless "
                                         "given --init-from %s", config, parent, shell_word(parent))


def check_taken_dir(model_dir: str, config: Path, resume: bool, overwrite: bool = False) -> str:
    """ConfigError for `model_dir`, the train.model_dir of the --config file `config` given without --model-dir,
    where it names no directory, or one that the run must not take: that of the run whose settings the file holds
    (but to --resume it), or any other when the file is the config.json of a model directory (a run moved or copied
    there, or an export: the file names the run's directory, where a run would replace or resume another's), or
    a new run's without `overwrite` in a directory that holds a run (a copy of its config.json: the error says so,
    where "already exists" would advise --overwrite). The directory to train in: `model_dir`, or the file's own for
    a relative one that ends its path."""
    home, path = config.resolve().parent, Path(model_dir).expanduser()
    if not model_dir.strip():
        raise ConfigError(f"--config {config}: train.model_dir is empty; give --model-dir")
    if path.resolve() == home or not path.is_absolute() and home.parts[-len(path.parts):] == path.parts:
        if not resume and not _run_files(home):   # settings put where the run will be (config.json too: no run yet)
            raise ConfigError(f"--config {config}: its train.model_dir is the directory the file is in, and a model "
                              "directory holds only its run's files: keep the file elsewhere, or give --model-dir")
        if not resume:
            raise ConfigError(f"--config {config}: its train.model_dir is the directory of the run whose settings it "
                              "holds; give the new run's --model-dir (or --resume to continue that run)")
        return str(home)   # (relative: from anywhere, that directory, not one of the working directory's)
    if config.name == CONFIG and (home / EXPORT).exists():
        raise ConfigError(f"--config {config}: the settings of the export in {home}, whose train.model_dir names the "
                          f"run it came from, {model_dir}: give --model-dir, a new directory to start a run (or "
                          f"fine-tune the export there with --init-from {shell_word(home)})")
    if _run_settings(config):
        raise ConfigError(f"--config {config}: the settings of the run in {home}, whose train.model_dir names another "
                          f"directory, {model_dir} (the run was moved or copied): give --model-dir, a new directory to "
                          f"start a run (or {home} with --resume to continue this one)")
    if not resume and not overwrite and (path / CONFIG).is_file():
        raise ConfigError(f"--config {config}: its train.model_dir, {model_dir}, holds a run (the file may be a copy "
                          "of that run's settings): give --model-dir, a new directory to start a run (or --resume to "
                          "continue that run, or --overwrite to replace it)")
    return model_dir


def warn_other_arch(cfg: Config, given: Dict[str, str], config: str) -> None:
    """Warn when --arch changes the architecture a --config file names (a run's config.json does) and the file sets
    what depends on the architecture (`ARCH_DEFAULTS`: dropout, learning rate, warm-up): those values were chosen
    for the other one, and stay. A file that names none may have been written for either."""
    theirs = jsonio.read_object(config, ConfigError)
    old = theirs.get("model", {}).get("arch", cfg.model.arch)
    keys = sorted({(sec, k) for d in ARCH_DEFAULTS.values() for sec, kv in d.items() for k in kv})
    if old == cfg.model.arch:
        return
    new = Config.from_dict({"model": {"arch": cfg.model.arch}}).to_dict()   # (a value at the new one's default: said
    kept = [(sec, k) for sec, k in keys if k in theirs.get(sec, {}) and theirs[sec][k] != new[sec][k]   # nothing)
            and not given.get(f"{sec}.{k}", "").startswith("--")
            and getattr(getattr(cfg, sec), k) == theirs[sec][k]]   # (not one the architecture does not read: reset)
    if not kept:
        return
    many = len(kept) > 1
    print(f"warning: --arch {cfg.model.arch} over --config {config} (arch {old}): its "
          + ", ".join(f"{sec}.{k} {theirs[sec][k]}" for sec, k in kept) + f" {'were' if many else 'was'} chosen for "
          f"{old} and {'stay' if many else 'stays'} ({cfg.model.arch}'s default{'s' * many}: "
          + ", ".join(f"{new[sec][k]}" for sec, k in kept)
          + f"); give {'them as flags' if many else 'it as a flag'} to change {'them' if many else 'it'}",
          file=sys.stderr)
