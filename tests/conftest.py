"""Shared fixtures: the real-data mirror (or a skip with the reason), synthetic files, captured `nmt` logs, the tiny
trained model of the translation tests and its Translator."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, List, Union

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only real-data mirror: $NMT_DATA_DIR, else <repo>/../shared/data; skips the test when absent."""
    env = os.environ.get("NMT_DATA_DIR")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    if not (path / "README.txt").is_file():
        pytest.skip(f"real-data mirror not found at {path} (set NMT_DATA_DIR to a directory laid out like shared/data)")
    return path


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[..., Path]:
    """write_file(name, content): text (written as UTF-8, exactly as given), bytes, or a list of lines."""
    def write(name: str, content: Union[str, bytes, List[str]]) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, list):
            content = "".join(line + "\n" for line in content)
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        return path
    return write


class _ListHandler(logging.Handler):
    def __init__(self, records: List[logging.LogRecord]):
        super().__init__(logging.DEBUG)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def nmt_logs() -> List[logging.LogRecord]:
    """Records logged under the `nmt` logger during the test (also when nmt.log turned propagation off)."""
    records: List[logging.LogRecord] = []
    logger = logging.getLogger("nmt")
    handler, level = _ListHandler(records), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """The tiny model directory of test_translate, test_score and test_evaluate (trained once per session)."""
    from tests.synth import tiny_model
    return tiny_model(tmp_path_factory)


@pytest.fixture(scope="module")
def tr(model_dir):
    from nmt.translate import Translator
    return Translator.from_dir(model_dir)


def pytest_configure(config):
    """Ctrl-C as at a terminal, for the tests of what it does (in process, and in the processes they start, which
    inherit an ignored signal): a suite started in the background by a script (`pytest ... &`, as CI may run it, and
    so each pytest-xdist worker) begins with SIGINT ignored, which nmt's commands keep ignored by design."""
    import signal
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _ignored() -> str:
    """The signals ignored by this process as the kernel has it (inherited by the processes it starts)."""
    try:
        with open("/proc/self/status") as f:
            return next((line.split()[1] for line in f if line.startswith("SigIgn:")), "")
    except OSError:
        return ""


@pytest.fixture(autouse=True)
def signals_as_found():
    """Fails a test that leaves a stopping signal's disposition changed: the next tests in the process (and the
    processes they start, which inherit an ignored signal) would see Ctrl-C or SIGTERM handled another way."""
    import signal
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before, ignored = [signal.getsignal(s) for s in sigs], _ignored()
    yield
    changed = [s.name for s, was in zip(sigs, before) if signal.getsignal(s) != was]
    for s, was in zip(sigs, before):
        signal.signal(s, was)
    assert not changed, f"the test left the handler of {', '.join(changed)} changed"
    assert _ignored() == ignored, f"the test left other signals ignored: SigIgn {ignored} -> {_ignored()}"
