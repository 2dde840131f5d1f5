"""`nmt-export`: a model directory's one checkpoint as a directory that translates and nothing else, to copy to a
server or hand to someone (what OpenNMT's `onmt_release_model` does, and fairseq users do by stripping the
optimizer from a checkpoint).

A training directory holds every kept checkpoint, the optimizer's states (twice the parameters' size each), the
encoded corpus, logs and curves: 193 MB for the quick start's model, of which translating reads 20. The export holds
config.json, the SentencePiece models, the chosen checkpoint's parameters as `params.best` with a manifest (so they
are verified on every load), its test scores (scores.json, for `nmt-serve`'s /info) and `export.json`, which says
where it came from. `nmt-translate`, `nmt-evaluate`, `nmt-score`, `nmt-serve` and `nmt-train --init-from` take it as
they take the training directory; `nmt-train --resume` cannot (no training state).

The directory is assembled beside its destination and renamed into place: an interrupted export leaves nothing
half-written under that name.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import glob
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Dict

from nmt import checkpoint as ckpt
from nmt import jsonio, manifest
from nmt.atomic import atomic_copy, atomic_write_text, sibling_stem
from nmt.commands import CommandParser, command, nonempty, shell_word
from nmt.config import Config, ConfigError
from nmt.dirlock import alive, shown
from nmt.storage import StorageError, mxnet_name

EXPORT = ckpt.EXPORT   # what an export was made from; --overwrite replaces only a directory that has one
EXPORT_FILE = re.compile(r"(config|scores|export)\.json|scores\.json\.lock|params\.best|manifest\.best\.json|"
                         r"spm\.\w+\.(model|vocab)")   # (scores.json and its lock: nmt-evaluate's too)


def build_export_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="nmt-export", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write one checkpoint of a model directory as a directory that only translates: config.json, "
                    "the SentencePiece models, the parameters as params.best (verified by their manifest) and the "
                    "checkpoint's test scores, without optimizer states, other checkpoints, logs or caches.",
        epilog="Examples:\n  nmt-export --model-dir models/tatoeba-ko-en --output release/tatoeba-ko-en\n"
               "  nmt-export --model-dir M --checkpoint avg --output release/M-avg\n")
    p.add_argument("--model-dir", required=True, type=nonempty(Path), help="a model directory written by nmt-train")
    p.add_argument("--checkpoint", default="best", metavar="WHICH",
                   help="best, avg, latest or a step number (default: best)")
    p.add_argument("--output", required=True, type=nonempty(Path),
                   help="the directory to write: a new or empty one (not the current directory)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export at --output")
    return p


@command(build_export_parser)
def export_main(args: argparse.Namespace) -> int:
    out = export_model(args.model_dir, args.output, args.checkpoint, overwrite=args.overwrite)
    size = sum(f.stat().st_size for f in out.iterdir())
    from nmt.cli_io import last_lines, reader_gone   # (a reader gone, `| head`, or a full stdout: after the export)
    return 0 if last_lines([f"exported checkpoint {args.checkpoint} of {args.model_dir} to {out} "
                            f"({size / 2 ** 20:.1f} MiB)"]) else reader_gone()


def export_model(model_dir, output, which: str = "best", overwrite: bool = False) -> Path:
    """Write checkpoint `which` of `model_dir` to the new directory `output` (see the module's docstring)."""
    model_dir, output = Path(model_dir), Path(output)
    from nmt.scoring import checkpoint_info
    cfg = Config.load(ckpt.config_of(model_dir, "--model-dir"))
    info = checkpoint_info(model_dir, which)   # its parameters verified against their manifest, and its step
    params = model_dir / str(info["params_file"])
    _check_output(model_dir, output, overwrite)
    _translates(model_dir, cfg, params)
    tmp = _beside(output, "export", os.getpid())   # made with the umask's permissions
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        # by an export killed (SIGKILL, SIGTERM): its copy being made, or the earlier export it replaced
        for left in _left(output, "export", mine=True) + _left(output, "replaced", mine=True):
            _remove(left)
        tmp.mkdir()
    except OSError as e:   # a file where a directory belongs, no permission, a read-only file system, ...
        why = "a file is in its path" if isinstance(e, (FileExistsError, NotADirectoryError)) else e.strerror
        made = "write in" if output.parent.is_dir() else "make"
        raise ConfigError(f"--output {output}: cannot {made} its directory {output.parent} ({why})") from None
    try:
        for name in [ckpt.CONFIG] + _tokenizer_files(model_dir, cfg):
            atomic_copy(model_dir / name, tmp / name)
        info = _copy_params(model_dir, which, info, tmp / ckpt.PARAMS_BEST)   # (maybe another's now: a run trains)
        # an average has no step's parameters: a step number given to the export finds none
        params, step = model_dir / str(info["params_file"]), 0 if info["params_file"] == ckpt.PARAMS_AVG else \
            int(info["step"] or 0)
        manifest.write_manifest(tmp, "best", [ckpt.PARAMS_BEST], step)
        scores, sha256 = _scores_of(model_dir, which, info, cfg.decode), manifest.sha256_of(tmp / ckpt.PARAMS_BEST)
        tested = test_sum_of(model_dir)   # (nmt-evaluate compares the model's own test files with it)
        if overwrite:   # what nmt-evaluate recorded in the export replaced, of the same parameters, is kept
            _keep_scores(output, scores, sha256, cfg.decode)
        if scores:
            atomic_write_text(tmp / ckpt.SCORES, jsonio.dumps(scores, indent=2, sort_keys=True)
                              + "\n")
        atomic_write_text(tmp / EXPORT, json.dumps({
            "model_dir": str(model_dir.resolve()), "checkpoint": str(which), "params_file": params.name,
            "step": step or None, "params_sha256": sha256, **({"test_sum": tested} if tested else {}),
            "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=2) + "\n")
        replaced = _beside(output, "replaced", os.getpid())
        try:   # an earlier export, or a link to one, replaced only now that the new one is complete, and deleted
            if overwrite and (output.exists() or output.is_symlink()):   # once it is in place (a kill meanwhile
                output.rename(replaced)                                  # leaves the new one); a link's target stays
            tmp.rename(output)
        except OSError as e:   # (not empty: written since `_check_output`, by another export at the same time)
            if e.errno == errno.EBUSY:   # a mount point `_check_output` cannot tell: a bind mount of the same disk
                raise _unreplaceable(output, "a mount point (or in use)") from None
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            raise ConfigError(f"--output {output}: another nmt-export wrote it as this one ran; nothing replaced "
                              "(--overwrite replaces it)") from None
    except StorageError as e:   # (full disk, `ulimit -f`): named in the output, not the copy removed here
        shutil.rmtree(tmp, ignore_errors=True)
        raise StorageError(str(e).replace(str(tmp), str(output))) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _remove(replaced)
    return output


# export.json's fields and their JSON types ("step": null for an average): what nmt-export writes
EXPORT_FIELDS = {"model_dir": (str,), "checkpoint": (str,), "params_file": (str,), "step": (int, type(None)),
                 "params_sha256": (str,), "test_sum": (str,), "exported": (str,)}


def read_export(export: Path, error=ckpt.CheckpointError) -> dict:
    """The object of `export`'s export.json; `error` naming the file and the field whose JSON type is not the one
    nmt-export writes (a hand edit), as a model directory's other files are checked before they are used."""
    path = Path(export) / EXPORT
    made = jsonio.read_object(path, error)
    for key, kinds in EXPORT_FIELDS.items():
        value = made.get(key)
        if key in made and not (isinstance(value, kinds) and not isinstance(value, bool)):
            wanted = "an integer or null" if int in kinds else "a string"
            raise error(f"{path}: field {key!r} is a JSON {jsonio.json_type(value)} ({json.dumps(value)}), where "
                        f"{wanted} belongs, as nmt-export writes it: export the model again (nmt-export --overwrite)")
    return made


def test_sum_of(model_dir: Path) -> str:
    """The sha256 of the test pairs the run of `model_dir` (a training directory, or an export of one) was tested
    with (`TrainState.test_sum`): "" where it is not known (a run or an export made before nmt recorded it)."""
    model_dir = Path(model_dir)
    if not (model_dir / ckpt.STATE).exists():   # (an export's export.json, checked: its errors are said)
        return str(read_export(model_dir).get("test_sum") or "") if (model_dir / EXPORT).is_file() else ""
    try:
        return ckpt.TrainState.load(model_dir).test_sum
    except ckpt.CheckpointError:
        return ""


def _keep_scores(output: Path, scores: dict, sha256: str, decode) -> None:
    """Into `scores`, the entries an earlier export at `output` recorded (nmt-evaluate's, an ensemble's it led too)
    for parameters of `sha256` (the same checkpoint exported again) at the export's decoding settings `decode`, where
    `scores` has none; those of other parameters describe what is replaced (as does a damaged scores.json there)."""
    from nmt.scoring import read_scores
    from nmt.shown_score import decoded_as
    if not ((output / EXPORT).is_file() and (output / ckpt.SCORES).is_file()):
        return
    try:
        same = read_export(output).get("params_sha256") == sha256
        earlier = read_scores(output, advice="")
    except ckpt.CheckpointError as e:   # (what the --overwrite is for, maybe: not "move it away")
        logging.getLogger("nmt.export").warning("%s; the export it replaces keeps no test scores", e)
        return
    for name, entries in earlier.items():
        for key, e in entries.items():
            if isinstance(e, dict) and (same or e.get("params_sha256") == sha256) and decoded_as(e, decode):
                scores.setdefault(name, {}).setdefault(key, e)


def _copy_params(model_dir: Path, which: str, info: dict, dest: Path) -> dict:
    """Copy checkpoint `which`'s parameter file (`info`: its `checkpoint_info`) to `dest`; the info of the file
    copied. A run training meanwhile may replace params.best (or prune a step) after `info` was read: the copy is
    checked against it, and the checkpoint read again."""
    from nmt.scoring import checkpoint_info
    for _ in range(10):
        with contextlib.suppress(FileNotFoundError):   # (a step pruned meanwhile: latest is newer now)
            atomic_copy(model_dir / str(info["params_file"]), dest)
            if info["sha256"] in (None, manifest.sha256_of(dest)):
                return info
        info = checkpoint_info(model_dir, which)
    raise ckpt.CheckpointError(f"--checkpoint {which} of {model_dir} was replaced 10 times while it was copied (a "
                               "run writes it): export again")


def _remove(path: Path) -> None:
    """Delete the directory `path`, or the symbolic link `path` is (rmtree refuses one, and ignore_errors hid it)."""
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _beside(output: Path, kind: str, pid) -> Path:
    """Where the export process `pid` makes its copy ("export") or puts the earlier export it replaces ("replaced")."""
    return output.parent / f".{sibling_stem(output)}.{kind}-{pid}"


def _left(output: Path, kind: str, mine: bool = False) -> list:
    """`_beside(output, kind, pid)` of the export processes no longer alive (`mine`: and of this one)."""
    return sorted(p for p in output.parent.glob(f".{glob.escape(sibling_stem(output))}.{kind}-*")
                  if not alive(p.name.rsplit("-", 1)[1]) or mine and p.name.endswith(f"-{os.getpid()}"))


def left_by_export(output: Path) -> str:
    """What an nmt-export killed as it made or replaced the export `output` left beside it, and what to do with it
    ("" when nothing): the two renames that replace an export leave neither at `output` for an instant."""
    new, old = _left(output, "export"), _left(output, "replaced")
    done = [p for p in new if (p / EXPORT).is_file()]   # written last, before the rename
    if done:
        return (f"an nmt-export stopped as it replaced it left the new export in {done[0]}" +
                (f" and the one it replaced in {old[0]}" if old else "") + f": move the new one to {output} (or "
                "export again, which removes both)")
    if old:
        return f"an nmt-export stopped as it replaced it left the earlier export in {old[0]}: move it back to {output}"
    return f"an nmt-export stopped before it was done left {new[0]}: export again" if new else ""


def _translates(model_dir: Path, cfg: Config, params: Path) -> None:
    """Build the model config.json describes and load the checkpoint into it, as translating will: a config.json
    edited by hand into another model was exported (exit 0) and failed at its first use. The errors name the file."""
    import mxnet as mx
    from nmt.members import load_member, model_files
    _, src_tok, tgt_tok = model_files(model_dir)
    load_member(model_dir, cfg, src_tok, tgt_tok, params, mx.cpu())


def _check_output(model_dir: Path, output: Path, overwrite: bool) -> None:
    """ConfigError unless `output` is a new (or empty) directory, or with `overwrite` an earlier export or a link."""
    for link in (p for p in output.parents if p.is_symlink() and not p.exists()):   # (resolve(): a traceback)
        raise ConfigError(f"--output {output}: {link} is a symbolic link to {os.readlink(link)}, which leads nowhere "
                          "(missing, or links back: a loop): mend the link, or give another --output")
    if (output.exists() or not output.is_symlink()) and output.resolve() == model_dir.resolve():   # (a loop: a link)
        raise ConfigError(f"--output {output} is the model directory: give another directory")
    mxnet_name(output.absolute(), "--output")   # (a model directory nothing could load)
    if output.is_symlink():   # (a deployment's current -> v1): the link is replaced, never followed
        return _check_link(output, overwrite)
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output {output} is a file: give a directory to create")
    if output.is_dir():   # renamed into place: a mount point cannot be, and the shell's directory would be gone
        with contextlib.suppress(FileNotFoundError):   # (a shell in a deleted directory: not the output)
            here = Path.cwd()
            what = ("a mount point" if os.path.ismount(output) else "the current directory" if here == output.resolve()
                    else "a directory holding the current one" if output.resolve() in here.parents else "")
            if what:
                raise _unreplaceable(output, what)
    if output.is_dir() and any(output.iterdir()):
        if not overwrite:
            raise ConfigError(f"--output {output} exists and is not empty: give a new directory, or --overwrite to "
                              "replace an earlier export there")
        if not (output / EXPORT).is_file():
            raise ConfigError(f"--overwrite replaces only an earlier export, and {output} has no {EXPORT} (a model "
                              "directory of nmt-train?): give another --output")
        foreign = sorted(p.name for p in output.iterdir() if not EXPORT_FILE.fullmatch(p.name))
        if foreign:   # (a model card, samples, a training run: --overwrite deleted them without a word)
            raise ConfigError(f"--overwrite replaces --output {output} whole, and it holds what no export writes: "
                              f"{shown(foreign)}; move {'it' if len(foreign) == 1 else 'them'} out of the directory "
                              "first, or give another --output")


def _check_link(output: Path, overwrite: bool) -> None:
    if not overwrite:
        raise ConfigError(f"--output {output} is a symbolic link (to {os.readlink(output)}): --overwrite replaces the "
                          "link with the export (what it points to stays as it is), or give its target")


def _unreplaceable(output: Path, what: str) -> ConfigError:
    inside = shell_word(str(output / "model") if output != Path(".") else "model")
    return ConfigError(f"--output {output} is {what}, which an export cannot replace (it is assembled beside its "
                       f"directory and renamed into place): give a new directory inside it, e.g. --output {inside}")


def _tokenizer_files(model_dir: Path, cfg: Config) -> list:
    """The SentencePiece models (and their readable .vocab files, where present) the model's config names."""
    from nmt.tokenizer import tokenizer_names
    names = sorted(set(tokenizer_names(cfg.data.src_lang, cfg.data.tgt_lang, cfg.model.shared_vocab)))
    return names + [v for v in (Path(n).with_suffix(".vocab").name for n in names) if (model_dir / v).is_file()]


def _scores_of(model_dir: Path, which: str, info: dict, decode) -> Dict[str, Dict[str, object]]:
    """The test scores recorded for checkpoint `which` (`checkpoint_info`: its parameter file and step), under any
    name of its parameters (latest is its step; the best's step is best), as the export's `best`; those made at its
    decoding settings `decode` (config.json's, maybe edited since) alone."""
    from nmt.scoring import checkpoint_key, read_scores
    from nmt.shown_score import decoded_as
    keys, avg = [checkpoint_key(str(which), info["params_file"])], info["params_file"] == ckpt.PARAMS_AVG
    if not avg:   # (an average's step is that of the last checkpoint in it)
        keys += [str(info["step"]), "best"]

    def theirs(entry) -> bool:   # best's entry may be another step's (recorded as a new best was written), and any
        # entry another run's parameters' (of an evaluation that outlasted an --overwrite)
        return (isinstance(entry, dict) and (avg or entry.get("step") in (None, info["step"]))
                and entry.get("params_sha256") in (None, info["sha256"]) and decoded_as(entry, decode))
    out, scores = {}, {}
    try:
        scores = read_scores(model_dir)
    except ckpt.CheckpointError as e:   # the export translates without them
        logging.getLogger("nmt.export").warning("%s; the export holds no test scores", e)
    for test, entries in scores.items():
        entry = next((entries[k] for k in keys if theirs(entries.get(k))), None)
        if entry is not None:
            out[test] = {"best": {**entry, "checkpoint": "best", "params_file": ckpt.PARAMS_BEST,
                                  **({"step": None} if info["params_file"] == ckpt.PARAMS_AVG else {})}}
    return out


def as_exported(export: Path, which: str) -> str:
    """"best" for checkpoint `which` (latest, avg or a step number other than its own) of an export made from that
    checkpoint (`--checkpoint avg` of an ensemble whose members are an export of an average and a training
    directory); a CheckpointError otherwise."""
    made = read_export(export)
    if made.get("checkpoint") == which or str(which).isdecimal() and made.get("step") == int(which):
        return "best"   # (its own step, asked when its manifest, damaged, names none: that is then said)
    of = f" (checkpoint {made['checkpoint']} of {made.get('model_dir')})" if made.get("checkpoint") else ""
    step = f" (step {made['step']})" if made.get("step") else ""
    raise ckpt.CheckpointError(f"{export} was written by nmt-export: it holds one checkpoint, {ckpt.PARAMS_BEST}{of}, "
                               f"and no {'step ' * str(which).isdecimal()}{which}; use --checkpoint best{step} (an "
                               "ensemble's members: export each from the same checkpoint)")


if __name__ == "__main__":   # `python -m nmt.export`: nmt-export
    raise SystemExit(export_main())
