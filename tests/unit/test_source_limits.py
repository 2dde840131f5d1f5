"""The package's source stays within the project's limits: lines of at most 120 characters and files of at most 400
lines, in its Python modules and in the page nmt-serve serves (nmt/serve/page.html), which is read as code is."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(REPO / "nmt").rglob("*.py"), REPO / "nmt" / "serve" / "page.html"])


def test_source_lines_and_files_are_within_the_limits():
    long_lines, long_files = [], []
    for path in SOURCES:
        lines = path.read_text(encoding="utf-8").splitlines()
        name = path.relative_to(REPO)
        long_lines += [f"{name}:{i} ({len(line)} characters)" for i, line in enumerate(lines, 1) if len(line) > 120]
        if path.suffix == ".py" and len(lines) > 400:
            long_files.append(f"{name} ({len(lines)} lines)")
    assert not long_lines and not long_files, long_lines + long_files
