"""System tests: real corpora from the offline mirror (they skip, saying why, when it is absent), marked `system`
so that `pytest -m system` runs only them and `pytest -m "not system"` leaves them out."""
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/system/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.system)
