"""How a training run meets SIGINT and SIGTERM (Ctrl-C, a cluster's preemption). In the training loop either one
asks for a checkpoint after the current update and a clean stop (`checkpoint_on_signal`); before the loop (setting up)
and after it (scoring the test sets) SIGTERM is what Ctrl-C is there, an interruption (`terminated_as_interrupt`):
its default, an immediate kill, left a half-made model directory that blocked the same command again, or a run that
ended without a word."""
from __future__ import annotations

import contextlib
import logging
import signal
from typing import Callable, Iterator

from nmt.commands import Terminated

logger = logging.getLogger("nmt.signals")


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
    """SIGINT/SIGTERM set `trainer.signal_name`; the loop saves a checkpoint after the current update and exits
    cleanly. A second signal stops at once (KeyboardInterrupt; a SIGTERM's is `Terminated`, exit code 143)."""
    def handler(signum, _frame):
        if trainer.signal_name:       # second signal: stop at once
            raise Terminated(signum) if signum != signal.SIGINT else KeyboardInterrupt
        trainer.signal_name = signal.Signals(signum).name
        logger.warning("%s received: saving a checkpoint after this update, then stopping "
                       "(send it again to stop at once)", trainer.signal_name)
    return _handling((signal.SIGINT, signal.SIGTERM), handler)


def hangup_unless_ignored() -> list:
    """[SIGHUP] for a handler to take, or [] when it is ignored (as under nohup, which a handler must not undo)."""
    return [signal.SIGHUP] if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else []


def terminated_as_interrupt(hangup: bool = False) -> contextlib.AbstractContextManager:
    """SIGTERM raises `Terminated`, a KeyboardInterrupt (as SIGINT does) with exit code 143, while the block runs;
    with `hangup` SIGHUP too (129), unless it is ignored (as under nohup)."""
    def handler(signum, _frame):
        logger.warning("%s received: stopping", signal.Signals(signum).name)
        raise Terminated(signum)
    return _handling((signal.SIGTERM, *(hangup_unless_ignored() if hangup else [])), handler)
