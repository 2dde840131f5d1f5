"""SentencePiece training in a child process. Its C++ trainer holds the GIL until it returns (90 s a language on the
`all` recipe's sample), so that a signal's handler (Ctrl-C, SIGTERM: `nmt.signals`) could not run meanwhile and the
stop the docs promise "at once" waited for it; the child is killed instead."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    else:
        _in_child(seed, options)
    _check_written(options["model_prefix"])


def processor(data: bytes):
    """The SentencePieceProcessor of a serialized model; RuntimeError (as SentencePiece's for a damaged one) for an
    empty one, which SentencePiece takes for a model it never loaded: a segmentation fault at its first use."""
    import sentencepiece as spm
    if not data:
        raise RuntimeError("an empty file")
    return spm.SentencePieceProcessor(model_proto=data)


def _check_written(prefix: str) -> None:
    """RuntimeError unless SentencePiece wrote `prefix`.model and .vocab (in a temporary directory) whole: on a full
    disk it writes them short (or empty) without a word."""
    from nmt.storage import scratch_full
    model, vocab = Path(f"{prefix}.model"), Path(f"{prefix}.vocab")
    data, pieces = model.read_bytes(), vocab.read_bytes().count(b"\n")
    try:
        whole = processor(data).get_piece_size() == pieces
    except RuntimeError:
        whole = False
    if not whole:
        raise RuntimeError(f"it wrote {model.name} ({len(data)} bytes) or {vocab.name} ({pieces} pieces) short, as on "
                           f"a full disk: {scratch_full(model.parent, 'the tokenizer SentencePiece writes there')}")


def _in_child(seed: int, options: dict) -> None:
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
