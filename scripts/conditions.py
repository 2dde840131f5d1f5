"""What a benchmark's JSON records of the conditions it ran in: the machine, its load at the start and the end, the
date and the commit of the code measured (`machine`, or `run_conditions` beside a script's own machine fields), so
that a figure can be read with what it was measured on (docs/performance.md quotes them)."""
from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]


def commit_of(checkout: Path) -> str:
    """The commit `checkout` is at ("+" when its tracked files differ from it), or "" outside git."""
    def git(*args: str) -> str:
        try:
            r = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):   # no git on the PATH
            return ""
        return r.stdout.strip() if r.returncode == 0 else ""
    head = git("rev-parse", "HEAD")
    return head + ("+" if head and git("status", "--porcelain", "--untracked-files=no") else "")


def run_conditions(load_at_start: Optional[Sequence[float]] = None) -> dict:
    """The CPU and its cores, the commit of this checkout, the date (UTC) and the load average at the start (as given)
    and now."""
    from nmt.parallel import cpu_name
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "commit": commit_of(REPO),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average_at_start": [round(x, 2) for x in load_at_start] if load_at_start else None,
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}


def machine(load_at_start: Optional[Sequence[float]] = None) -> dict:
    """`run_conditions`, with Python, MXNet and OMP_NUM_THREADS."""
    import mxnet as mx
    return {"python": platform.python_version(), "mxnet": mx.__version__,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), **run_conditions(load_at_start)}


def check_outputs(model_dirs: Sequence = (), inputs: Optional[dict] = None, **paths) -> None:
    """Each report file (flag name -> path, None: not asked for) found writable before the measurement (its missing
    directories are made as it is written): a path that cannot be written is a one-line error naming the flag now,
    not a traceback after minutes of measuring (`nmt.cli_io.output_dir`). One that is a file of `model_dirs`
    (config.json, params.best ...), one of the `inputs` (flag -> file) or another flag's report is refused: the report
    would replace it; "-" is refused (no report is written to standard output), and so is one inside a model
    directory or an export (as `check_work_dir` tells one above a work directory): nmt-train --overwrite would then
    refuse to replace the run, for a file no run writes."""
    from nmt.cli_io import output_dir, refuse_overwriting
    from nmt.config import ConfigError
    from nmt.textfile import UNFLUSHABLE
    written: dict = {}
    for name, path in paths.items():
        flag = f"--{name.replace('_', '-')}"
        if path is not None and str(path) == "-":   # (it was written as a file named "-", unchecked)
            raise ConfigError(f"{flag} -: a report is written to a file, not to standard output; give a file name")
        if path is not None:
            if Path(path).suffix.lower() in (".gz", *UNFLUSHABLE):   # (a .gz report held plain text)
                raise ConfigError(f"{flag} {path}: a report is written uncompressed; give a name without "
                                  f"{Path(path).suffix} (and compress the file afterwards)")
            if os.path.islink(path) and os.path.islink(os.path.realpath(path)):   # (Path.resolve: a traceback)
                raise ConfigError(f"{flag} {path}: a symbolic link in a loop of links; give another file")
            output_dir(flag, Path(path).parent, file=str(path))
            refuse_overwriting(flag, str(path), dict(inputs or {}), [d for d in model_dirs if d])
            where, what = _enclosing_run(path, itself=False)
            if what:
                raise ConfigError(f"{flag} {path} is inside {where}, {what}: a report there would stop --overwrite "
                                  "from replacing it; write it outside any model directory")
            target = os.path.realpath(path)
            if target in written:
                raise ConfigError(f"{flag} {path} is the file of {written[target]} too: one report would replace the "
                                  "other; give another file")
            written[target] = flag


def check_work_dir(flag: str, path) -> None:
    """ConfigError if the directory `path` a script keeps its files in is a model directory or inside one: a run's
    or an export (`_run_kind`), also through a symbolic link. What it wrote there is what no run writes: `nmt-train
    --overwrite` (nmt-export's too) would then refuse the directory."""
    from nmt.config import ConfigError
    where, what = _enclosing_run(path, itself=True)
    if what:
        inside = "is" if where in (Path(path).absolute(), Path(path).resolve()) else f"is inside {where},"
        raise ConfigError(f"{flag} {path} {inside} {what}: what is written there would stop --overwrite from "
                          "replacing it; give a directory outside any model directory")


def _enclosing_run(path, itself: bool) -> Tuple[Optional[Path], str]:
    """The nearest directory that is `path` (if `itself`) or holds it, also through a symbolic link (where it leads),
    and is a model directory or an export, with what it is (`_run_kind`); (None, "") if there is none."""
    given = (Path(path).absolute(), Path(path).resolve())
    for where in dict.fromkeys(p for d in given for p in (d, *d.parents) if p.is_dir()):
        what = _run_kind(where, itself=itself and where in given)
        if what:
            return where, what
    return None, ""


def _run_kind(where: Path, itself: bool) -> str:
    """"a model directory", "an export (nmt-export)" or "" for the directory `where`: `itself` the work directory,
    a run's by any file a run writes (its train.log, train.lock, state.json or a checkpoint, as `nmt.dirlock` tells
    one) or export.json; a directory above it by what only nmt writes (a run's train.lock or a checkpoint; an
    export.json beside params.best): a train.log or a state.json there may be another program's (`nmt-train ... |
    tee train.log` in a project directory or $TMPDIR, which refused every work directory below it)."""
    from nmt import manifest
    from nmt.checkpoint import EXPORT, LOCK, LOG, PARAMS_BEST, STATE
    if (where / EXPORT).is_file() and (itself or (where / PARAMS_BEST).is_file()):
        return "an export (nmt-export)"
    marks = (LOG, LOCK, STATE) if itself else (LOCK,)
    return "a model directory" if any((where / m).is_file() for m in marks) or manifest.step_keys(where) else ""


def check_image(flag: str, path) -> None:
    """ConfigError for an image file whose suffix names no format matplotlib writes (.png, .svg, .pdf ...; none:
    PNG), before the measurement: after it, savefig's ValueError was a traceback and the figures were lost."""
    if path is None or not Path(path).suffix:
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from nmt.config import ConfigError
    known = sorted(k for k in FigureCanvasAgg.get_supported_filetypes() if k != "pgf")   # (pgf: LaTeX's)
    if Path(path).suffix[1:].lower() not in known:
        raise ConfigError(f"{flag} {path}: no image format is named {Path(path).suffix!r}; give one of "
                          + ", ".join(f".{k}" for k in known))
