"""Results tables and training curves from model directories (what `scripts/results_table.py` writes).

Everything is read back from the files a training run leaves (config.json, state.json, scores.json,
metrics.jsonl), so a table can be regenerated at any time from the model directories alone; nothing is typed in.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from nmt import checkpoint as ckpt, manifest
from nmt.config import Config, DecodeConfig
from nmt.config_resume import PER_INVOCATION
from nmt.dirlock import config_coming, in_place_of_file, no_checkpoint_yet
from nmt.export import EXPORT, read_export
from nmt.log import read_metrics
from nmt.scoring import DEV_SET, ENSEMBLE_PREFIX, entry_decode, read_scores


class ResultsError(ValueError):
    """A model directory lacks what a results table needs (names the directory and the file)."""


@dataclass
class Run:
    name: str                      # directory name
    path: Path
    config: Config
    state: ckpt.TrainState         # state.json
    scores: dict                   # scores.json: test set -> checkpoint -> record
    metrics: List[dict]            # metrics.jsonl rows (one per validation)

    @property
    def direction(self) -> str:
        return f"{self.config.data.src_lang}→{self.config.data.tgt_lang}"

    @property
    def hours(self) -> float:
        return self.state.elapsed / 3600.0


def _validated(best_bleu: float) -> Optional[float]:
    """A run's best dev BLEU; None for a run that never validated (its state's -1)."""
    return None if best_bleu < 0 else best_bleu


def _two_places(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:.2f}"


def load_run(path) -> Run:
    """A trained model directory; ResultsError naming the missing file otherwise (CheckpointError / ConfigError
    naming a file that is not valid)."""
    path = Path(path)
    if (path / EXPORT).is_file():   # (its scores.json has no training run behind it here)
        source = read_export(path, ResultsError).get("model_dir")
        raise ResultsError(f"{path}: an export (nmt-export), which holds no training run: give the model directory "
                           f"it was exported from{f', {source}' if source else ''}")
    if not path.is_dir():
        raise ResultsError(f"{path}: no such directory; give model directories written by nmt-train")
    if not (path / ckpt.CONFIG).is_file():
        kind = in_place_of_file(path / ckpt.CONFIG)
        if kind:
            raise ResultsError(f"{path}: its {ckpt.CONFIG} is {kind}, not the file of the run's settings that "
                               "nmt-train writes: put that file in its place")
        raise ResultsError(f"{path}: no {ckpt.CONFIG}: " + (config_coming(path) or "not a model directory written by "
                                                               "nmt-train"))
    if not (path / ckpt.STATE).is_file():
        held = [ckpt.params_file(s) for s in ckpt.kept_steps(path)] + [
            name for name in (ckpt.PARAMS_AVG, ckpt.PARAMS_BEST) if (path / name).is_file()]
        if held:   # (or a model copied as --init-from reads it: config.json, tokenizers, a parameter file)
            raise ResultsError(f"{path}: no {ckpt.STATE}, which a results table reads (the run's steps and dev "
                               f"scores), though it holds {held[-1]}: a run killed as it saved a checkpoint (nmt-train "
                               "--resume goes on from it), or a model copied without its training state?")
        raise ResultsError(no_checkpoint_yet(path))   # (a run stopped, or still, before its first checkpoint)
    metrics_file = path / ckpt.METRICS
    return Run(path.name, path, Config.load(path / ckpt.CONFIG), ckpt.TrainState.load(path), read_scores(path),
               read_metrics(metrics_file) if metrics_file.is_file() else [])


def _best_record(run: Run, test: str, checkpoint: Optional[str]) -> Optional[dict]:
    """The run's own record (never an ensemble's) of `checkpoint` (best, avg, latest or a step), or by default of
    best, else avg, else its latest step recorded."""
    per_ckpt = {k: v for k, v in run.scores.get(test, {}).items() if not k.startswith(ENSEMBLE_PREFIX)}
    steps = sorted((int(k) for k in per_ckpt if k.isdecimal()), reverse=True)
    def of_step(step: int) -> Optional[dict]:   # recorded under its step, or under best when it is the best's
        best = per_ckpt.get("best")
        return per_ckpt.get(str(step)) or (best if isinstance(best, dict) and best.get("step") == step else None)
    if checkpoint == "latest":
        return of_step(ckpt.latest_step(run.state)) if run.state.params_files else None
    if checkpoint:
        return of_step(int(checkpoint)) if checkpoint.isdecimal() else per_ckpt.get(checkpoint)
    for name in ("best", "avg"):   # dev-selected first: choosing by test score would tune on the test
        if name in per_ckpt:
            return per_ckpt[name]
    return per_ckpt[str(steps[0])] if steps else None


def _records(run: Run, test: str, checkpoint: Optional[str]) -> List[tuple]:
    """(row name, record, member states) of the run's own checkpoint, then of each ensemble led by it
    (`evaluate --ensemble`; with `checkpoint`, those of that checkpoint)."""
    out = []
    rec = _best_record(run, test, checkpoint)
    if rec is not None:
        out.append((run.name, rec, [run.state]))
    own = (checkpoint if not checkpoint or not checkpoint.isdecimal() and checkpoint != "latest" else   # its key
           str(ckpt.latest_step(run.state) if checkpoint == "latest" else int(checkpoint)))
    for key, ens in sorted(run.scores.get(test, {}).items()):
        if key.startswith(f"{ENSEMBLE_PREFIX}{own}:" if own else ENSEMBLE_PREFIX) and "ensemble" in ens:
            names = [Path(p).name for p in ens["ensemble"]]
            out.append((" + ".join(names) + " (ensemble)", ens, _member_states(run, ens["ensemble"])))
    return out


def _member_states(lead: Run, paths: Sequence[str]) -> List[Optional[ckpt.TrainState]]:
    """The training states of an ensemble's members: each at its recorded path, else beside the leading run (model
    directories copied elsewhere together); None for a member found in neither (its time shows as unknown)."""
    states = []
    for p in paths:
        here = next((d for d in (Path(p), lead.path.parent / Path(p).name) if (d / ckpt.STATE).is_file()), None)
        states.append(None if here is None else lead.state if here.resolve() == lead.path.resolve()
                      else ckpt.TrainState.load(here))
    return states


def results_rows(runs: Sequence[Run], checkpoint: Optional[str] = None) -> List[dict]:
    """One row per (run, test set): direction, BLEU, chrF, ko-mecab BLEU (Korean output), signatures, time;
    scores of `checkpoint` (default: best on dev, else the average of the last checkpoints, else a step's); then
    a row per ensemble the run leads, with the training time and updates of each member."""
    rows = []
    for run in runs:
        for test in sorted(set(run.scores) - {DEV_SET}):   # dev scores choose settings; the tables report tests
            for name, rec, states in _records(run, test, checkpoint):
                rows.append(_row(run, name, test, rec, states))
    return rows


def _row(run: Run, name: str, test: str, rec: dict, states: Sequence[Optional[ckpt.TrainState]]) -> dict:
    """A results row; `hours` and `updates` are per member (one entry for a single model; None: not found)."""
    return {"run": name, "test_set": test, "direction": run.direction, "n": rec.get("n"),
            "bleu": rec["bleu"], "chrf": rec["chrf"], "bleu_ko_mecab": rec.get("extra", {}).get("bleu_ko_mecab"),
            "bleu_signature": rec.get("bleu_signature"), "chrf_signature": rec.get("chrf_signature"),
            "mecab_signature": rec.get("extra_signatures", {}).get("bleu_ko_mecab"), "checkpoint": rec.get("checkpoint"), "beam_size": rec.get("beam_size"),
            "length_penalty": rec.get("length_penalty"),
            "hours": [None if s is None else s.elapsed / 3600.0 for s in states],
            "updates": [None if s is None else s.step for s in states], "epochs": run.state.epoch,
            "stopped": run.state.stopped, "best_dev_bleu": _validated(run.state.best_bleu),
            "hardware": run.state.hardware or None}


def config_diff(base: Config, other: Config) -> Dict[str, object]:
    """Settings of `other` that differ from `base` (section.field -> value), ignoring paths and each invocation's
    keys (devices, a time limit, progress and TensorBoard: `PER_INVOCATION`), which leave the training as it was;
    but for mixed precision (--amp), which changes its numerics. A --valid-metric as the one the run chose by (an
    unset one, null in config.json, is its target language's: the "bleu" an older run recorded is no difference).
    Of the model's settings, only those `other`'s architecture reads (its `config_fields`; an LSTM run against a
    Transformer base has no ff_size of its own)."""
    from nmt.models import ARCHITECTURES
    ignore = {*PER_INVOCATION, "train.log_every"} - {"train.amp"}
    a, b = base.to_dict(), other.to_dict()
    a["train"]["valid_metric"], b["train"]["valid_metric"] = base.valid_metric, other.valid_metric
    read = getattr(ARCHITECTURES.get(other.model.arch), "config_fields", ())   # (none named: every one, as the CLI)
    unread = {f"model.{k}" for k in b["model"] if read and k not in (*read, "arch", "shared_vocab")}
    out = {}
    for section, fields in b.items():
        for key, value in fields.items():
            name = f"{section}.{key}"
            if name not in ignore | unread and a.get(section, {}).get(key) != value:
                out[name] = value
    return out


def markdown_table(rows: Sequence[dict], hardware: str) -> str:
    """The README's results table; `hardware` names the machine of runs that did not record theirs."""
    lines = ["| test set | direction | BLEU | chrF | BLEU ko-mecab | run | checkpoint, beam | training time | "
             "updates | hardware |", "|---|---|---:|---:|---:|---|---|---:|---:|---|"]
    for r in rows:
        mecab = f"{r['bleu_ko_mecab']:.2f}" if r["bleu_ko_mecab"] is not None else ""
        lines.append(f"| {r['test_set']} ({r['n']}) | {r['direction']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {mecab} | "
                     f"{r['run']} | {r['checkpoint']}, beam {r['beam_size']} | "
                     f"{' + '.join('?' if h is None else f'{h * 60:.0f}' for h in r['hours'])} min | "
                     f"{' + '.join('?' if u is None else str(u) for u in r['updates'])} | "
                     f"{r.get('hardware') or hardware} |")
    sigs = sorted({s for r in rows for s in (r["bleu_signature"], r["chrf_signature"], r["mecab_signature"]) if s})
    if sigs:
        lines += ["", "sacreBLEU signatures: " + "; ".join(f"`{s}`" for s in sigs)]
    return "\n".join(lines) + "\n"


# What a scores record says of how it was decoded (nmt.scoring.score_test_set): a decoding ablation names each
# that differs from the base's record.
DECODE_KEYS = (*entry_decode(DecodeConfig()), "prefix_words")


def decode_rows(base: Run, reports: Sequence[dict], test: str) -> List[dict]:
    """Decoding ablations of `base` without retraining: its averaged checkpoint (scores.json "avg") and
    `scripts/evaluate.py --json` reports of other beam sizes / length penalties (their "results" per test set)."""
    rows = []
    avg = base.scores.get(test, {}).get("avg")
    if avg:   # (the run's --average-last may have changed since: its manifest names the newest step averaged)
        rows.append({"what": f"the averaged checkpoint (params.avg{_averaged_upto(base)})", "record": avg})
    best = _best_record(base, test, None) or {}
    for report in reports:
        rec = report.get("results", {}).get(test)
        if not rec:
            continue
        diff = [f"{k}={rec.get(k)}" for k in DECODE_KEYS if rec.get(k) != best.get(k)]
        refs = [(r.get("bleu_signature") or "").split("|")[0] for r in (rec, best)]   # nrefs:N, another test set
        diff += [refs[0].replace(":", "=")] if refs[0] != refs[1] and best else []
        if rec.get("ensemble"):   # the base and other models decoding together
            diff.insert(0, "ensemble with " + " + ".join(Path(p).name for p in rec["ensemble"][1:]))
        if best.get("n") and rec.get("n") != best["n"]:   # a part of the set (--max-sentences)
            diff.append(f"{rec.get('n')} of {best['n']} sentences")
        rows.append({"what": f"decoding: {', '.join(diff) or 'same as base'} ({rec.get('checkpoint')} checkpoint)",
                     "record": rec})
    return sorted(rows, key=lambda r: r["what"])


def _averaged_upto(run: Run) -> str:
    """", up to step N": the newest step the run's params.avg averages (its manifest), or "" if unknown."""
    try:
        return f", up to step {manifest.read_manifest(run.path, 'avg')['step']}"
    except ckpt.CheckpointError:
        return ""


def ablation_table(base: Run, runs: Sequence[Run], test: str, decode_reports: Sequence[dict] = ()) -> str:
    """One row per run: what differs from `base`, test BLEU/chrF on `test`, best dev BLEU, training time; then
    the decoding ablations of `base` (see `decode_rows`). A run still in progress says so."""
    lines = [f"| run | differs from {base.name} | {test} BLEU | chrF | best dev BLEU | time | updates |",
             "|---|---|---:|---:|---:|---:|---:|"]
    others = [r for r in runs if r.path.resolve() != base.path.resolve()]
    for run in [base, *others]:
        rec = _best_record(run, test, None)
        diff = config_diff(base.config, run.config)
        what = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in sorted(diff.items())) or "(base)"
        key = next((k for k, v in run.scores.get(test, {}).items() if v is rec), "best")   # not the current best:
        whose = f"params.avg{_averaged_upto(run)}" if key == "avg" else f"step {key}"
        what += "" if key == "best" else f" (test scores of {whose})"
        bleu, chrf = (_two_places(rec[k] if rec else None) for k in ("bleu", "chrf"))
        why = run.state.stopped
        time = f"{run.hours * 60:.0f} min" + (" (unfinished)" if not why else
                                              "" if why == "time_budget" else f" ({why.replace('_', ' ')})")
        best = _two_places(_validated(run.state.best_bleu))
        lines.append(f"| {run.name} | {what} | {bleu} | {chrf} | {best} | {time} | {run.state.step} |")
    for row in decode_rows(base, decode_reports, test):
        rec = row["record"]
        lines.append(f"| {base.name} | {row['what']} | {rec['bleu']:.2f} | {rec['chrf']:.2f} | | | |")
    return "\n".join(lines) + "\n"


def example_indices(n_lines: int, n: int) -> List[int]:
    """`n` line numbers spread evenly over a test set of `n_lines` (its first lines are often alike)."""
    if n <= 0 or n_lines <= 0:
        return []
    if n >= n_lines:
        return list(range(n_lines))
    return sorted({round(i * (n_lines - 1) / max(n - 1, 1)) for i in range(n)})


def plot_curves(runs: Sequence[Run], path) -> Path:
    """Training loss and dev BLEU against updates and against training wall time, one line per run, in the image
    format `path`'s suffix names (PNG without one)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from nmt.atomic import atomic_open
    fig = Figure(figsize=(11, 7.5), dpi=90)
    axes = fig.subplots(2, 2)
    for run in runs:
        rows = [m for m in run.metrics if "step" in m]
        if not rows:
            continue
        steps = [m["step"] for m in rows]
        minutes = [m.get("elapsed", 0.0) / 60.0 for m in rows]
        bleu = [m.get("dev_bleu", float("nan")) for m in rows]
        loss = [m.get("train_loss", float("nan")) for m in rows]
        label = f"{run.name} ({run.direction})"
        for col, x in enumerate((steps, minutes)):
            axes[0][col].plot(x, loss, label=label)
            axes[1][col].plot(x, bleu, label=label)
    for col, xlabel in enumerate(("updates", "training wall time (min)")):
        axes[0][col].set_ylabel("training loss per target token\n(label-smoothed, since previous validation)")
        axes[1][col].set_ylabel("dev BLEU (greedy)")
        for row in range(2):
            axes[row][col].set_xlabel(xlabel)
            axes[row][col].grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    FigureCanvasAgg(fig)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=path.suffix[1:].lower() or "png")
    return path
