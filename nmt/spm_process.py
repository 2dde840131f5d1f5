"""SentencePiece training in a child process. Its C++ trainer holds the GIL until it returns (90 s a language on the
`all` recipe's sample), so that a signal's handler (Ctrl-C, SIGTERM: `nmt.signals`) could not run meanwhile and the
stop the docs promise "at once" waited for it; the child is killed instead."""
from __future__ import annotations

import json
import os
import subprocess
import sys

_CHILD = """import ctypes, json, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C reaches both: the parent stops it
try:   # killed with the parent (kill -9, out of memory) rather than left training for minutes (Linux)
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))   # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[2]):   # (it died before that)
    sys.exit(1)
import sentencepiece as spm
seed, options = json.loads(sys.argv[1])
spm.set_random_generator_seed(seed)
try:
    spm.SentencePieceTrainer.train(**options)
except RuntimeError as e:
    sys.stderr.write(str(e))
    sys.exit(1)
"""


# Lines of text trained on in this process: fewer train in a fraction of a second (5,749 Tatoeba lines: 0.07 s), where
# a child's start (50 ms) would cost more than a signal waits; the test suite trains hundreds of tiny tokenizers.
IN_PROCESS_LINES = 20_000


def train(seed: int, lines: int, **options) -> None:
    """`spm.SentencePieceTrainer.train(**options)` after `spm.set_random_generator_seed(seed)` on a text of `lines`
    lines: in a child process (the same interpreter) when they are over IN_PROCESS_LINES; RuntimeError with
    SentencePiece's message when it fails. An exception here (a signal's KeyboardInterrupt) kills the child first."""
    if lines <= IN_PROCESS_LINES:
        import sentencepiece as spm
        spm.set_random_generator_seed(seed)
        spm.SentencePieceTrainer.train(**options)
        return
    from nmt.job import describe_exit
    # -P: no Python file of the working directory imported in its place (a csv.py there ran, a json.py broke it). No
    # preexec_fn: this process has MXNet's threads, and code between fork and exec could deadlock on their locks.
    proc = subprocess.Popen([sys.executable, "-P", "-c", _CHILD, json.dumps([seed, options]), str(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode:
        raise RuntimeError(err.decode("utf-8", "replace").strip() or f"its process {describe_exit(proc.returncode)}"
                           + " (out of memory?)" * (proc.returncode == -9))
