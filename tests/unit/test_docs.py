"""The README and docs/: the README stays a short manual whose test command is what CI runs, every relative link
and anchor resolves, results/ holds only current files, and the README's results come from results/."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set:
    """The anchors of a page's headings; a line starting with # in a fenced code block (a shell comment) is none."""
    prose = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", prose, re.M)}


def test_comments_in_code_blocks_are_not_headings(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n```bash\n# train a model\nnmt-train\n```\n\n## Serving\n", encoding="utf-8")
    assert anchors(page) == {"title", "serving"}


def test_the_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_the_readme_test_command_is_what_ci_runs():
    readme = README.read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 -m venv .venv" in ci and "python3 -m venv .venv" in readme
    assert "pip install -q -r requirements/dev.txt -e ." in ci and "pip install -r requirements/dev.txt -e ." in readme
    command = "python -m pytest -q -n auto --dist loadfile tests"
    assert command in ci and f".venv/bin/{command}" in readme


def test_docs_has_a_page_per_topic():
    for name in ("training", "distributed", "translation", "evaluation", "performance", "results", "faq",
                 "architecture", "serving", "transformer"):
        assert (DOCS / f"{name}.md").is_file(), name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_and_anchors_resolve(page):
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):   # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        rel = dest.relative_to(REPO).as_posix() if dest.is_relative_to(REPO) else str(dest)
        assert dest.exists(), f"{page.name}: link to {target} does not resolve"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: no heading for #{anchor} in {rel}"


def test_results_holds_only_current_files():
    names = [p.relative_to(REPO / "results").as_posix() for p in (REPO / "results").rglob("*") if p.is_file()]
    stale = [n for n in names if re.search(r"(_b|_c|_first|_r\d+b?|_amd|_zen5|_earlier)\.(json|png)$", n)
             or n.startswith(("earlier/", "part4-diagnosis/")) or n == "PERFORMANCE-HISTORY.md"]
    assert not stale
    for benchmark in ("benchmark_train.json", "benchmark_train.png", "benchmark_decode.json", "benchmark_ab.json"):
        assert benchmark in names


def test_the_readme_results_come_from_the_results_table():
    readme = README.read_text(encoding="utf-8")
    section = readme[readme.index("## Results"):readme.index("## Notebooks")]
    table = (REPO / "results" / "results.md").read_text(encoding="utf-8")
    scores = re.findall(r"\|\s*\**(\d+\.\d\d)\**\s*(?=\|)", section)
    assert len(scores) >= 12
    for score in scores:
        assert f"| {score} |" in table, score


def test_architecture_md_names_every_module():
    """The page promises one line per module; nmt/config_resume.py, nmt/signals.py and nmt/serve/__main__.py were in
    none, and the config row named a function of another module."""
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = sorted(p.relative_to(REPO) for p in (REPO / "nmt").rglob("*.py") if "__pycache__" not in p.parts)
    assert [str(m) for m in modules if m.name not in page] == []


@pytest.mark.parametrize("page", sorted((REPO / "results").glob("*.md")) + [DOCS / "results.md"],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_a_results_table_lists_the_signature_of_each_score_it_shows(page):
    """A table with ko-mecab BLEU figures names their signature beside 13a's and chrF's (`scripts/runs.py`'s
    markdown_table): the tables of results/ were written before it did, and docs/results.md showed the figures of en->ko
    runs with no ko-mecab signature, so not how to compare them."""
    text = page.read_text(encoding="utf-8")
    for table in re.findall(r"^\| test set \|.*?(?=^\n(?!\|)|\Z)(?:\nsacreBLEU signatures: .*)?", text, re.M | re.S):
        rows = [r.split("|") for r in table.splitlines() if r.startswith("| ") and "→" in r]
        if any(len(r) > 6 and r[5].strip() for r in rows):   # the BLEU ko-mecab column
            assert "tok:ko-mecab" in table, table.splitlines()[-1]


def test_every_dotted_nmt_name_resolves():
    """A name such as `nmt.scoring.score_test_set` that the README, docs/ or a requirements file's comment gives is
    one the package has: requirements/common.txt named `nmt.log.TensorBoardWriter` after it moved to
    nmt.tensorboard."""
    texts = [p.read_text(encoding="utf-8") for p in (*PAGES, *sorted((REPO / "requirements").glob("*.txt")))]
    names = sorted({m.group(0) for t in texts for m in re.finditer(r"(?<![\w/.-])nmt(?:\.[A-Za-z_]\w*)+", t)})
    missing = []
    for name in names:
        parts = name.split(".")
        obj = importlib.import_module("nmt")
        for i, part in enumerate(parts[1:], 2):   # a module's own name, else an attribute
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                obj = getattr(obj, part, None)
        if obj is None:
            missing.append(name)
    assert len(names) > 20 and missing == []
