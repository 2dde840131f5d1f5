"""Fault injection: SIGKILL at 10 seeded random moments of a training run; after each, `--resume` continues, and
the run ends bit-identical to an uninterrupted one. Half the kills come at a random moment (start-up included,
between saves or in one by chance), half inside a save for sure: just before or after the N-th rename of a file into
the model directory (a parameter file, optimizer states, a manifest, state.json), N drawn at random. The random
moments after start-up are drawn in validations, not seconds, so that a fast host cannot finish the run first."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import mxnet as mx
import numpy as np

from nmt import checkpoint as ckpt
from nmt import manifest
from tests.synth import write_task

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
# Long enough that all 10 kills land before the run ends, on any host: the first comes before training starts, a
# kill in a save within 32 renames (at most 8 checkpoints, 32 steps), one at a random moment within 4 validations
# and 0.1 s (16 steps + 0.1 s).
MAX_STEPS = 400
KILLS = 10


def _cmd(task, model_dir: Path, *extra: str):
    return [sys.executable, str(REPO / "scripts" / "train.py"), "--train-src", task["train_src"], "--train-tgt",
            task["train_tgt"], "--dev-src", task["dev_src"], "--dev-tgt", task["dev_tgt"], "--model-dir",
            str(model_dir), "--vocab-size", "400", "--embed-size", "16", "--hidden-size", "16", "--num-layers", "1",
            "--batch-size", "8", "--valid-every", "4", "--keep-last", "2", "--no-progress",
            "--valid-max-sentences", "3", "--valid-beam", "1", "--no-eval", "--patience", "0",
            "--max-steps", str(MAX_STEPS), *extra]


# Runs scripts/train.py with os.replace wrapped: SIGKILL before or after its N-th call (argv: N, before|after).
_KILL_IN_SAVE = """
import os, runpy, signal, sys
real, calls, at, when = os.replace, [0], int(sys.argv[1]), sys.argv[2]
def replace(src, dst):
    calls[0] += 1
    if calls[0] == at and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)
    if calls[0] == at and when == "after":
        os.kill(os.getpid(), signal.SIGKILL)
sys.argv = sys.argv[3:]
os.replace = replace
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _killed_in_a_save(cmd, rng: random.Random) -> bool:
    """Run `cmd` (a scripts/train.py command) to be SIGKILLed inside a save; whether it was."""
    at, when = rng.randint(4, 32), rng.choice(["before", "after"])
    r = subprocess.run([cmd[0], "-c", _KILL_IN_SAVE, str(at), when, *cmd[1:]], capture_output=True, env=ENV,
                       timeout=300)
    assert r.returncode in (0, -signal.SIGKILL), r.stderr.decode()[-3000:]
    return r.returncode == -signal.SIGKILL


def _run_until_killed(cmd, log: Path, validations: int, delay: float) -> bool:
    """Start `cmd`; SIGKILL it `delay` seconds after its `validations`-th validation of this run, or with
    `validations` 0 during start-up: `delay` seconds after it started or once it has built its data, whichever
    comes first. Whether it was killed (False: it finished first)."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=ENV)
    try:
        start = time.time()
        if validations:
            while log.read_bytes().count(b"validation step") < validations and proc.poll() is None:
                assert time.time() < start + 120, log.read_text()[-3000:]
                time.sleep(0.005)
            time.sleep(delay)
        else:
            while time.time() < start + delay and b"batches:" not in log.read_bytes() and proc.poll() is None:
                time.sleep(0.005)
        if proc.poll() is not None:
            assert proc.returncode == 0, log.read_text()[-3000:]
            return False
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True
    finally:
        if proc.poll() is None:
            proc.kill()


def _final_params(model_dir: Path) -> dict:
    return {k: v.asnumpy() for k, v in mx.nd.load(str(model_dir / ckpt.params_file(MAX_STEPS))).items()}


def test_sigkill_at_random_moments_then_resume_is_bit_identical(tmp_path):
    task = write_task(tmp_path / "task", n_train=400)
    ref = tmp_path / "ref"
    subprocess.run(_cmd(task, ref), check=True, capture_output=True, env=ENV, timeout=300)
    rng = random.Random(24)
    d, kills, mid_save = tmp_path / "killed", 0, 0
    for i in range(KILLS):
        extra = ["--resume"] if (d / ckpt.STATE).exists() or manifest.step_keys(d) else ["--overwrite"]
        if i % 2:
            killed = _killed_in_a_save(_cmd(task, d, *extra), rng)
            mid_save += killed
        else:
            validations = 0 if i == 0 else rng.randint(1, 4)   # the first: during start-up
            delay = rng.uniform(0.0, 2.5) if i == 0 else rng.uniform(0.0, 0.1)
            killed = _run_until_killed(_cmd(task, d, *extra), tmp_path / f"run{i}.log", validations, delay)
        if not killed:
            break
        kills += 1
    r = subprocess.run(_cmd(task, d, "--resume"), capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert kills == KILLS and mid_save == KILLS // 2, f"{kills} kills, {mid_save} in a save: lengthen the run"
    assert ckpt.TrainState.load(d).step == MAX_STEPS
    a, b = _final_params(ref), _final_params(d)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), f"{k} differs after {kills} kills ({mid_save} during a save)"
