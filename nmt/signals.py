"""How a run meets SIGINT, SIGTERM and SIGHUP (Ctrl-C, a cluster's preemption, the terminal closed). In the training
loop each asks for a checkpoint after the current update and a clean stop (`checkpoint_on_signal`); before the loop
(setting up) and after it (scoring the test sets), and in the other commands, SIGTERM and SIGHUP are what Ctrl-C is
there, an interruption (`terminated_as_interrupt`): their default, an immediate kill, left a half-made model directory
that blocked the same command again, or a run that ended without a word. SIGHUP is left alone when it is ignored, as
under nohup."""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
from typing import Callable, Iterator

from nmt.commands import Terminated

logger = logging.getLogger("nmt.signals")

# the signals that stop a command as Ctrl-C does, by name, with the exit code each ends it with (128 + its number)
INTERRUPTS = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}


@contextlib.contextmanager
def _handling(signals, handler: Callable) -> Iterator[None]:
    old = {}
    for sig in signals:
        with contextlib.suppress(ValueError):   # not the main thread (e.g. inside some notebook runners)
            old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def checkpoint_on_signal(trainer) -> contextlib.AbstractContextManager:
    """SIGINT, SIGTERM and SIGHUP set `trainer.signal_name`; the loop saves a checkpoint after the current update and
    exits cleanly. A second signal stops at once (KeyboardInterrupt; a SIGTERM's or SIGHUP's is `Terminated`)."""
    def handler(signum, _frame):
        if trainer.signal_name:       # second signal: stop at once
            raise Terminated(signum) if signum != signal.SIGINT else KeyboardInterrupt
        trainer.signal_name = signal.Signals(signum).name
        leave_hung_up_terminal(signum)
        logger.warning("%s received: saving a checkpoint after this update, then stopping "
                       "(send it again to stop at once)", trainer.signal_name)
    return _handling(stopping_signals(), handler)


def hangup_unless_ignored() -> list:
    """[SIGHUP] for a handler to take, or [] when it is ignored (as under nohup, which a handler must not undo)."""
    return [signal.SIGHUP] if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else []


def stopping_signals() -> list:
    """SIGINT, SIGTERM and SIGHUP for a handler to take, but those ignored: SIGHUP under nohup, SIGINT in a script's
    background job (`nmt-train ... &`), where Ctrl-C on the script must not reach it."""
    return [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if signal.getsignal(s) != signal.SIG_IGN]


def terminated_as_interrupt() -> contextlib.AbstractContextManager:
    """SIGTERM and SIGHUP (unless ignored) raise `Terminated`, a KeyboardInterrupt (as SIGINT does) with exit code 143
    or 129, while the block runs."""
    def handler(signum, _frame):
        leave_hung_up_terminal(signum)
        logger.warning("%s received: stopping", signal.Signals(signum).name)
        raise Terminated(signum)
    return _handling((signal.SIGTERM, *hangup_unless_ignored()), handler)


@contextlib.contextmanager
def deferred(second_at_once: bool = True) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP that come while the block runs act at its end, as their handlers then would (Ctrl-C's
    KeyboardInterrupt, `terminated_as_interrupt`'s `Terminated`, a default's kill); a second one acts at once (around
    a chunk's write to a slow reader: stopped, a command leaves no half-written line, and a write that hangs can be
    stopped), or, not `second_at_once`, waits too, and only the first acts (a block that must not be cut short: a
    Popen whose child the caller must know of to stop it, which returns in milliseconds)."""
    previous, got = {s: signal.getsignal(s) for s in stopping_signals()}, []

    def act(signum: int, frame=None) -> None:
        if callable(previous[signum]):
            previous[signum](signum, frame)
        else:   # the default's (or a handler set outside Python): the process ends as it would have
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def handler(signum, frame):
        leave_hung_up_terminal(signum)   # (the rest of the write goes nowhere rather than failing)
        if got and second_at_once:
            act(signum, frame)
        got.append(signum)
    try:
        with _handling(previous, handler):
            yield
    finally:   # (also when the write failed: a reader stopped by the same SIGTERM breaks the pipe)
        if got:
            act(got[0])


def leave_hung_up_terminal(signum: int) -> None:
    """At SIGHUP: standard output and error that were a terminal now hung up (closed: every write to it fails, EIO)
    go to /dev/null, so that what the command writes as it stops (a progress bar, its last lines, a message) cannot
    end it with an error before its checkpoint or exit code. A SIGHUP sent to a live terminal leaves it alone."""
    if signum != signal.SIGHUP:
        return
    for fd in (1, 2):
        try:
            os.write(fd, b"")   # (nothing written: a hung-up terminal's EIO or nothing)
        except OSError as e:
            if e.errno == errno.EIO:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
                os.close(null)
