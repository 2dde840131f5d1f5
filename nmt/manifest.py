"""Checkpoint manifests: which files a checkpoint is made of, with their sizes and sha256.

`manifest.<key>.json` (key: the 8-digit step, `best` or `avg`) is written atomically after the files it lists, so a
checkpoint whose manifest exists is complete, and one whose files no longer match it (truncated by a crash during a
copy, a flipped byte, a deleted file) is known to be bad before MXNet reads it. A step checkpoint's manifest also
holds its TrainState: `--resume` can fall back to the newest intact checkpoint even when state.json is damaged.
Each records config.json's model settings and language pair too, which the parameters are of: a load compares them
with config.json's.
"""
from __future__ import annotations

import hashlib
import json
import logging
import numbers
import re
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from nmt.atomic import atomic_write_text
from nmt.commands import shell_word
from nmt.download import sha256_file as sha256_of   # cached by (path, size, mtime): verifying costs one read

logger = logging.getLogger("nmt.checkpoint")

FORMAT = 1


class CheckpointError(RuntimeError):
    """A model directory that is missing, incomplete, damaged or would be overwritten; the message says what to do."""


def manifest_name(key: str) -> str:
    return f"manifest.{key}.json"


def model_files(model_dir: Path) -> List[str]:
    """The files every checkpoint needs besides its own: the SentencePiece models. Not config.json: people edit it
    (decoding defaults, a variant's settings), and a damaged one fails loudly on its own (JSON, validation, shapes)."""
    return sorted(p.name for p in model_dir.glob("spm.*.model") if p.is_file())


def write_manifest(model_dir: Path, key: str, names: Sequence[str], step: int,
                   state: Optional[Dict[str, Any]] = None, model_of: Optional[str] = None) -> None:
    """List `names` (plus the SentencePiece models) with sizes and sha256 in manifest.<key>.json;
    call it after the files are complete and renamed into place. The model settings recorded are config.json's,
    or (`model_of`) those the manifest of that key records: parameters copied or averaged from its checkpoint are
    of its model, whatever config.json says now."""
    model_dir = Path(model_dir)
    files = {n: {"bytes": (model_dir / n).stat().st_size, "sha256": sha256_of(model_dir / n)}
             for n in list(names) + model_files(model_dir)}
    body = {"format": FORMAT, "checkpoint": key, "step": step, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "files": files}
    recorded = read_manifest(model_dir, model_of) if model_of else _model_settings(model_dir)
    for name in ("model", "languages"):   # the settings the parameters are of (`check_model_settings` compares)
        if recorded.get(name) is not None:
            body[name] = recorded[name]
    if state is not None:
        body["state"] = state
    body["self_sha256"] = _self_hash(body)
    atomic_write_text(model_dir / manifest_name(key), json.dumps(body, indent=1) + "\n")


def _self_hash(body: Dict[str, Any]) -> str:
    """sha256 of a manifest's content without its own hash: a flipped byte anywhere in the manifest shows."""
    rest = {k: v for k, v in body.items() if k != "self_sha256"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode("utf-8")).hexdigest()


def read_manifest(model_dir: Path, key: str) -> Dict[str, Any]:
    """The manifest of checkpoint `key`; CheckpointError naming it when missing or unreadable."""
    path = Path(model_dir) / manifest_name(key)
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(body, dict) or not isinstance(body.get("files"), dict):
            raise ValueError("no file list")
        if body.get("self_sha256") != _self_hash(body):
            raise ValueError("its content differs from its own sha256")
        return body
    except FileNotFoundError:
        raise ManifestMissing(f"{path} is missing, so the checkpoint cannot be verified") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is damaged (not a checkpoint manifest: {e})") from None


class ManifestMissing(CheckpointError):
    """A checkpoint without its manifest: one being saved (written last), or whose save was killed."""


def _problem(path: Path, entry: Dict[str, Any]) -> Optional[str]:
    """What is wrong with one listed file, or None."""
    if not path.is_file():
        return f"{path} is missing"
    size = path.stat().st_size
    if size != entry.get("bytes"):
        kind = "truncated" if size < entry.get("bytes", 0) else "longer than written"
        return (f"{path} is {kind}: {size} bytes, its manifest says {entry.get('bytes')} (or another model's file is "
                "in its place)")
    if sha256_of(path) != entry.get("sha256"):
        return (f"{path} is corrupted: its sha256 differs from the one in its manifest (same size, other content; or "
                "another model's file is in its place)")
    return None


def verify(model_dir: Path, key: str, attempts: int = 3) -> Dict[str, Any]:
    """The manifest of checkpoint `key` after checking every file it lists; CheckpointError naming the first bad
    file and what is wrong. A reader racing a trainer that replaces params.best may see the new file with the old
    manifest for an instant: it reads both again before it gives up."""
    for attempt in range(attempts):
        body = read_manifest(model_dir, key)
        problems = [p for p in (_problem(Path(model_dir) / n, e) for n, e in body["files"].items()) if p]
        if not problems:
            return body
        if attempt + 1 < attempts:
            time.sleep(0.2)
    raise CheckpointError("; ".join(problems))


def _model_settings(model_dir: Path) -> Dict[str, Any]:
    """{"model": the model section of `model_dir`'s config.json as written, "languages": [its data section's src_lang,
    tgt_lang]}, each None when not readable (its own errors are named where it is read as a configuration): the
    languages say which SentencePiece model reads the source."""
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"model": None, "languages": None}
    model, data = (cfg.get(k) if isinstance(cfg, dict) else None for k in ("model", "data"))
    languages = [data.get("src_lang"), data.get("tgt_lang")] if isinstance(data, dict) else None
    return {"model": model if isinstance(model, dict) else None, "languages": languages}


def check_model_settings(params: Path, key: str) -> None:
    """CheckpointError naming each model setting (and language) of config.json beside the parameter file `params`
    that differs from those its checkpoint `key` was saved with (its manifest's; one that records none, or none
    readable, is not compared: its damage is named where it is verified). Parameters fit a model of other settings
    where no shape changes (a Transformer's heads, an attention), which then translates otherwise, silently; the
    rest of config.json may be edited."""
    try:
        recorded = read_manifest(params.parent, key)
    except CheckpointError:
        return
    current, differ = _model_settings(params.parent), []
    mine, saved = current["model"], recorded.get("model")
    if saved is not None and mine is not None and mine != saved:
        differ = [f"model.{k} {json.dumps(mine.get(k))} (saved with {json.dumps(saved.get(k))})"
                  for k in sorted(set(mine) | set(saved)) if mine.get(k) != saved.get(k)]
    mine, saved = current["languages"], recorded.get("languages")
    if saved is not None and mine is not None and mine != saved:   # (the source read by the other's SentencePiece)
        differ += [f"data.{k} {json.dumps(m)} (saved with {json.dumps(v)})"
                   for k, m, v in zip(("src_lang", "tgt_lang"), mine, saved) if m != v]
    if not differ:
        return
    raise CheckpointError(f"{params} cannot be loaded: {params.parent / 'config.json'} has {', '.join(differ)}: the "
                          f"model settings its parameters were trained with ({manifest_name(key)}) describe them and "
                          "cannot be edited; put them back (a decoding default, config.json's decode section, may be)")


# The files of a step checkpoint, (stem, suffix) of `<stem>.<step_key(step)><suffix>`; the manifest first.
STEP_FILES = (("manifest", ".json"), ("params", ""), ("trainer", ".states"))


def step_key(step: int) -> str:
    """A step checkpoint's key in its file names: the step in 8 digits (`params.00001000`)."""
    return f"{step:08d}"


def check_which(which: Any) -> None:
    """TypeError unless `which` names a checkpoint as the commands do (best, latest, avg, a step: str or int):
    None or 630.0 would be an "unknown checkpoint 'None'", True would be taken for step 1."""
    if not isinstance(which, (str, numbers.Integral)) or isinstance(which, bool):
        raise TypeError(f"which must be best, latest, avg or a step number (str or int), got {type(which).__name__}")


def numbered_step(name: str, stem: str, suffix: str = "") -> Optional[int]:
    """The step of a step checkpoint's file name `<stem>.<8-digit step><suffix>` (`params.00001000`,
    `manifest.00001000.json`); None for any other name (`params.best`, `manifest.avg.json`, ...)."""
    m = re.fullmatch(rf"{re.escape(stem)}\.(\d{{8}}){re.escape(suffix)}", Path(name).name)
    return int(m.group(1)) if m else None


def step_keys(model_dir: Path) -> List[int]:
    """Steps that have a manifest or a parameter file (whose missing manifest is then the problem), newest first."""
    steps = set()
    if not Path(model_dir).is_dir():
        return []
    for p in Path(model_dir).iterdir():
        for stem, suffix in STEP_FILES[:2]:   # not the optimizer states: a resume can do without them
            step = numbered_step(p.name, stem, suffix)
            if step is not None:
                steps.add(step)
    return sorted(steps, reverse=True)


def _intact(model_dir: Path, key: str) -> bool:
    try:
        verify(model_dir, key, attempts=1)
        return True
    except CheckpointError:
        return False


def newest_intact(model_dir: Path, unsaved: Optional[List[int]] = None) -> Tuple[Dict[str, Any], List[str]]:
    """The manifest of the newest step checkpoint whose files all match it, and what was wrong with the newer
    ones (the steps of those without a manifest also added to `unsaved`: being saved, or a save killed);
    CheckpointError listing every problem when none is intact."""
    problems: List[str] = []
    for step in step_keys(model_dir):
        try:
            body = verify(model_dir, step_key(step), attempts=1)
        except CheckpointError as e:
            problems.append(f"step {step}: {e}")
            if unsaved is not None and isinstance(e, ManifestMissing):
                unsaved.append(step)
            continue
        if "state" in body:
            return body, problems
        problems.append(f"step {step}: {Path(model_dir) / manifest_name(step_key(step))} holds no training state")
    best = (Path(model_dir) / manifest_name("best")).is_file()
    if not problems and best:   # (a copy made to translate)
        raise CheckpointError(f"{model_dir} holds no step checkpoint, only its best one: use --checkpoint best; "
                              f"training cannot resume from it (--init-from {shell_word(model_dir)} fine-tunes it in a "
                              "new run)")
    kept = (f"; its best parameters still translate, and --init-from {shell_word(model_dir)} goes on from them in a "
            "new --model-dir" if best and _intact(model_dir, "best") else "")
    raise CheckpointError(f"no intact checkpoint in {model_dir} ("
                          + ("; ".join(problems) or "no checkpoint manifest") + f"); restore the files from a backup"
                          f"{kept}; --overwrite starts a new run there, deleting them")
