"""Dataset recipes: public Korean-English corpora, fetched (mirror, cache or network) and split into train/dev/tests.

The registry (sources with URL, sha256, licence and citation; recipes built from them) is the package data
file `nmt/recipes.json`. `load_data(cfg)` is the single entry point used by training.

Where a file comes from, in order: the offline mirror (`--data-dir`, else $NMT_DATA_DIR: a directory laid
out like shared/data), the download cache (`DataConfig.cache_dir`, else `data/cache/` of a checkout, else
~/.cache/nmt), the network. Every file is checked against its registered sha256 wherever it comes from."""
from __future__ import annotations

import json
import logging
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from nmt.cleaning import clean_training_pairs, warn_dev_in_tests
from nmt.commands import shell_word
from nmt.config import ConfigError, DataConfig
from nmt.corpus import CorpusError, Pairs, concat, read_parallel, read_tsv
from nmt.download import DOWNLOAD_TIMEOUT, download, download_archive, mirror_lacks, verify_file
from nmt.languages import check_languages
from nmt.rest_markup import clean_rest_docs
from nmt.storage import check_writable
from nmt.textfile import TooFewPairs

logger = logging.getLogger("nmt.recipes")
# Training files given without dev files: this many of their pairs, drawn with this seed, are the dev set.
FILES_DEV_SIZE, FILES_DEV_SEED = 500, 1



@dataclass
class FileSpec:
    """One registered file: where it lives in a mirror/cache, its checksum and how to obtain it."""
    path: str                           # relative to the mirror and to the cache directory
    sha256: str
    bytes: int
    url: Optional[str] = None           # direct download
    archive_url: Optional[str] = None   # or: a tar(.gz) to download, holding `member`
    member: Optional[str] = None
    derived: Optional[str] = None       # or: mirror-only, made by this procedure (cannot be downloaded)


@dataclass
class Source:
    """A public corpus with Korean and English sides."""
    name: str
    title: str
    license: str
    citation: str
    homepage: str
    format: str                         # "parallel" (files ko, en) or "tsv" (file tsv, columns ko_col, en_col)
    files: Dict[str, FileSpec]
    ko_col: Optional[int] = None
    en_col: Optional[int] = None
    clean: Optional[str] = None         # extra source-specific cleaning: "rest-docs"


@dataclass
class Recipe:
    """Training sources, a dev set drawn from them, and named test sets."""
    name: str
    description: str
    train: List[str]
    tests: Dict[str, str]               # short test name -> source name
    dev_size: int
    dev_seed: int


@dataclass
class DatasetSplits:
    train: Pairs
    dev: Pairs
    tests: Dict[str, Pairs]             # keyed by a short name, e.g. "tatoeba-test", "flores200-devtest"
    drops: Dict[str, int] = field(default_factory=dict)   # pairs removed, by reason (reading and cleaning)


# What load_source reads: a source's format -> the files it needs; its optional cleaning step
FORMATS, CLEANERS = {"parallel": {"ko", "en"}, "tsv": {"tsv"}}, (None, "rest-docs")


def _load_registry(path: Path) -> Tuple[Dict[str, Source], Dict[str, Recipe]]:
    """The sources and recipes of `path`; ValueError naming the entry for a format, cleaning step or source name
    that nothing reads (a typo would otherwise train on other text than meant)."""
    reg = json.loads(path.read_text(encoding="utf-8"))
    sources = {}
    for name, s in reg["sources"].items():
        files = {k: FileSpec(**f) for k, f in s.pop("files").items()}
        sources[name] = src = Source(name=name, files=files, **s)
        bad = ([f"format {src.format!r} (use {' or '.join(FORMATS)})"] if src.format not in FORMATS else
               [f"files {sorted(files)} (format {src.format} needs {sorted(FORMATS[src.format])})"]
               if set(files) != FORMATS[src.format] else [])
        bad += [f"clean {src.clean!r} (use rest-docs or leave it out)"] if src.clean not in CLEANERS else []
        if bad:
            raise ValueError(f"{path}: source {name!r}: {'; '.join(bad)}")
    recipes = {name: Recipe(name=name, **r) for name, r in reg["recipes"].items()}
    for name, r in recipes.items():
        unknown = sorted(set(r.train) - set(sources)) + sorted(set(r.tests.values()) - set(sources))
        if unknown:
            raise ValueError(f"{path}: recipe {name!r} names unknown sources {unknown}")
    return sources, recipes


SOURCES, RECIPES = _load_registry(Path(__file__).with_name("recipes.json"))


def default_cache_dir() -> Path:
    """`data/cache/` of the checkout when running from one, else ~/.cache/nmt (or $XDG_CACHE_HOME/nmt)."""
    root = Path(__file__).resolve().parent.parent
    if (root / "setup.py").is_file() and (root / "nmt" / "recipes.json").is_file():
        return root / "data" / "cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nmt"


def resolve_data_dir(data_dir: Optional[str]) -> Optional[Path]:
    """The offline mirror: the --data-dir flag, else $NMT_DATA_DIR, else None. A named but missing dir is an error."""
    env = os.environ.get("NMT_DATA_DIR", "")
    value, origin = (data_dir, "--data-dir") if data_dir else (env, "NMT_DATA_DIR")
    if value and not Path(value).expanduser().is_dir():
        hint = (f"; NMT_DATA_DIR={env} counts only without it: --data-dir {shell_word(env)}"
                if data_dir and env and Path(env).expanduser().is_dir() else "")   # (advised when it is there)
        given = (" (given, from a --config file, or recorded in a run's config.json: --data-dir given again "
                 f"replaces it{hint})" if data_dir else "")
        raise CorpusError(f"{origin} {value}: no such directory{given}; point it at a directory laid out like "
                          "shared/data (without a mirror, a run's files come from the download cache)")
    return Path(value).expanduser() if value else None


def fetch(source: Source, key: str, data_dir: Optional[Path], cache_dir: Path, *,
          timeout: float = DOWNLOAD_TIMEOUT) -> Path:
    """Local path of `source.files[key]`: from the mirror, else the cache, else downloaded into the cache."""
    spec = source.files[key]
    what = f"{source.name} ({key})"
    for path in ([data_dir / spec.path] if data_dir is not None else []) + [cache_dir / spec.path]:
        if path.is_file():   # the mirror's, else the cache's (`path`, where it is downloaded to, below)
            verify_file(path, spec.sha256, what)
            return path
    missing = mirror_lacks(data_dir, spec.path) if data_dir is not None else ""
    if spec.derived:
        raise CorpusError(f"{what}: {spec.path} is mirror-only{missing}: it cannot be downloaded because it was "
                          f"derived by a procedure ({spec.derived}). Pass --data-dir DIR or set NMT_DATA_DIR=DIR to a "
                          f"directory laid out like shared/data that contains {spec.path}.")
    check_writable(cache_dir, "--cache-dir")   # a clear error before any download
    logger.info("downloading %s into %s", what, cache_dir)
    try:
        if spec.archive_url:
            wanted = [f for f in source.files.values() if f.archive_url == spec.archive_url]
            download_archive(spec.archive_url, wanted, cache_dir, timeout=timeout)
        else:
            download(spec.url, path, spec.sha256, timeout=timeout)
    except CorpusError as e:
        raise CorpusError(f"{what}: {e}{missing}") from None
    return path


def load_source(source: Source, data_dir: Optional[Path], cache_dir: Path, *,
                skip_invalid_utf8: bool = False) -> Tuple[Pairs, Dict[str, int]]:
    """A registered corpus as Korean -> English pairs, plus counts of what source-specific cleaning dropped."""
    if source.format == "tsv":
        pairs = read_tsv(fetch(source, "tsv", data_dir, cache_dir), source.ko_col, source.en_col,
                         skip_invalid_utf8=skip_invalid_utf8, name=source.name)
    else:
        pairs = read_parallel(fetch(source, "ko", data_dir, cache_dir), fetch(source, "en", data_dir, cache_dir),
                              skip_invalid_utf8=skip_invalid_utf8, name=source.name)
    if source.clean == "rest-docs":
        return clean_rest_docs(pairs)
    return pairs, {}


def load_data_again(cfg: DataConfig) -> DatasetSplits:
    """`load_data(cfg)` of a trained model's data, read again (nmt-evaluate --dev-set draws its dev set from them):
    the warnings of reading and cleaning them are its training's, shown at -v only (`nmt.log.warned_before`)."""
    from nmt.log import warned_before
    with warned_before("the model's training data read again"):
        return load_data(cfg)


def load_data(cfg: DataConfig) -> DatasetSplits:
    """Train/dev/test pairs in the direction cfg.src_lang -> cfg.tgt_lang, normalized, filtered, deduplicated.

    With cfg.train_src/train_tgt the explicit files are used (dev files required, test files optional);
    otherwise the recipe cfg.recipe. Training pairs sharing a side with dev or any test set are removed.
    """
    if cfg.train_src or cfg.train_tgt or cfg.dev_src or cfg.dev_tgt or cfg.test_src or cfg.test_tgt:
        return _load_files(cfg)
    if not cfg.recipe:
        raise ConfigError("no training data: give --recipe NAME (one of "
                          f"{', '.join(sorted(RECIPES))}) or --train-src/--train-tgt with --dev-src/--dev-tgt")
    if cfg.recipe not in RECIPES:
        raise ConfigError(f"--recipe {cfg.recipe!r}: unknown recipe; known recipes: {', '.join(sorted(RECIPES))}")
    recipe = RECIPES[cfg.recipe]
    factors = parse_upsample(cfg.upsample, recipe)
    data_dir, cache_dir = _data_and_cache_dirs(cfg)
    drops: Counter = Counter()

    def load(name: str) -> Pairs:
        pairs, counts = load_source(SOURCES[name], data_dir, cache_dir, skip_invalid_utf8=cfg.skip_invalid_utf8)
        drops.update(counts)
        drops.update(pairs.dropped)
        return pairs

    for name in (*recipe.tests.values(), *recipe.train):   # a mirror-only corpus missing: say so before downloading
        for key, spec in SOURCES[name].files.items():
            if spec.derived and not any(d is not None and (d / spec.path).is_file() for d in (data_dir, cache_dir)):
                fetch(SOURCES[name], key, data_dir, cache_dir)   # its error names the corpus and the way out
    tests = _test_sets(recipe, load)
    parts = []
    for name in recipe.train:   # cleaned one by one so that the log says what each corpus contributes
        part, counts = clean_training_pairs(load(name), list(tests.values()),
                                            max_chars=cfg.max_chars, max_ratio=cfg.max_ratio)
        drops.update(counts)
        parts.append(part)
    pool, counts = clean_training_pairs(concat(parts, f"{recipe.name}-train"), [],
                                        max_chars=cfg.max_chars, max_ratio=cfg.max_ratio)   # cross-corpus duplicates
    drops.update(counts)
    if len(pool) <= recipe.dev_size:
        raise TooFewPairs(f"recipe {recipe.name}: only {len(pool)} training pairs left after cleaning, too few to hold "
                          f"out {recipe.dev_size} for dev; relax --max-chars/--max-ratio", len(pool),
                          recipe.dev_size + 1)
    train, dev = _hold_out_dev(pool, recipe.dev_size, recipe.dev_seed, cfg, drops)
    train = _upsampled(train, dict(zip(recipe.train, parts)), factors)
    splits = DatasetSplits(train, dev, tests, dict(drops))
    logger.info("recipe %s %s->%s: %d train, %d dev, tests %s", recipe.name, cfg.src_lang, cfg.tgt_lang, len(train),
                len(dev), ", ".join(f"{k} {len(v)}" for k, v in tests.items()))
    return _oriented(splits, cfg)


def _hold_out_dev(pool: Pairs, size: int, seed: int, cfg: DataConfig, drops: Counter) -> Tuple[Pairs, Pairs]:
    """`size` random pairs of the cleaned training `pool` as the dev set, and the rest (without pairs sharing a side
    with them) as training pairs; the same split for the same pool and seed."""
    # Random order (not sorted): any prefix of dev is itself a random sample (validation may use a prefix).
    dev_idx = random.Random(seed).sample(range(len(pool)), size)
    taken = set(dev_idx)
    dev = pool.select(dev_idx, name="dev")
    train, counts = clean_training_pairs(pool.select([i for i in range(len(pool)) if i not in taken]), [dev],
                                         max_chars=cfg.max_chars, max_ratio=cfg.max_ratio, copies_said=True)
    drops.update(counts)
    return train, dev


MAX_UPSAMPLE = 1000   # most copies --upsample makes of a corpus (100,000,000 ran out of memory)


def parse_upsample(spec: Optional[str], recipe: Recipe) -> Dict[str, int]:
    """--upsample "corpus=K[,corpus=K]" -> {corpus: K}; ConfigError naming the flag unless every corpus is one
    of the recipe's training corpora and every K an integer >= 1."""
    out: Dict[str, int] = {}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        name, sep, k = item.partition("=")
        name = name.strip()
        if name not in recipe.train:
            raise ConfigError(f"--upsample {spec!r}: {name!r} is not a training corpus of recipe {recipe.name} "
                              f"(its corpora: {', '.join(recipe.train)})")
        try:
            factor = int(k)
        except ValueError:
            factor = 0
        if not sep or factor < 1:
            raise ConfigError(f"--upsample {spec!r}: give corpus=K with an integer K >= 1 (e.g. {name}=4)")
        if factor > MAX_UPSAMPLE:   # K copies of the corpus are made in memory
            raise ConfigError(f"--upsample {spec!r}: {name} repeated {factor} times would hold {factor} copies of it "
                              f"in memory; give K <= {MAX_UPSAMPLE} (weights of 2-10 are usual)")
        if name in out:
            raise ConfigError(f"--upsample {spec!r}: {name} is given twice; give each corpus once")
        out[name] = factor
    return out


def _upsampled(train: Pairs, parts: Dict[str, Pairs], factors: Dict[str, int]) -> Pairs:
    """`train` plus K-1 more copies of its pairs that come from each corpus upsampled K times."""
    extra = []
    for name, k in factors.items():
        if k < 2:
            continue
        theirs = set(zip(parts[name].src, parts[name].tgt))
        mine = train.select([i for i, pair in enumerate(zip(train.src, train.tgt)) if pair in theirs])
        extra += [mine] * (k - 1)
        logger.info("upsampled %s x%d: %d of %d training pairs, %d added", name, k, len(mine), len(train),
                    len(mine) * (k - 1))
    return concat([train, *extra], train.name) if extra else train


def _test_sets(recipe: Recipe, load: Callable[[str], Pairs]) -> Dict[str, Pairs]:
    """The recipe's test sets (stored ko -> en), each named by its key."""
    return {key: Pairs(p.src, p.tgt, key, p.dropped) for key, p in ((k, load(n)) for k, n in recipe.tests.items())}


def _data_and_cache_dirs(cfg: DataConfig) -> Tuple[Optional[Path], Path]:
    """The offline mirror (if any) and the download cache a data config names."""
    return resolve_data_dir(cfg.data_dir), (Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir())


def load_tests(cfg: DataConfig) -> Dict[str, Pairs]:
    """The test sets of recipe cfg.recipe in the direction cfg.src_lang -> cfg.tgt_lang: what `load_data` returns
    as `.tests`, without reading and cleaning the training corpora."""
    if cfg.recipe not in RECIPES:
        raise ConfigError(f"--recipe {cfg.recipe!r}: unknown recipe; known recipes: {', '.join(sorted(RECIPES))}")
    data_dir, cache_dir = _data_and_cache_dirs(cfg)
    tests = _test_sets(RECIPES[cfg.recipe], lambda name: load_source(SOURCES[name], data_dir, cache_dir,
                                                                     skip_invalid_utf8=cfg.skip_invalid_utf8)[0])
    return tests if cfg.src_lang == "ko" else {k: v.swapped() for k, v in tests.items()}


def _oriented(splits: DatasetSplits, cfg: DataConfig) -> DatasetSplits:
    """Registry sources are stored ko -> en; swap every split for en -> ko."""
    if cfg.src_lang == "ko":
        return splits
    return DatasetSplits(splits.train.swapped(), splits.dev.swapped(),
                         {k: v.swapped() for k, v in splits.tests.items()}, splits.drops)


def _pair_of_flags(cfg: DataConfig, kind: str) -> Optional[Tuple[str, str]]:
    src, tgt = getattr(cfg, f"{kind}_src"), getattr(cfg, f"{kind}_tgt")
    if bool(src) != bool(tgt):
        raise ConfigError(f"--{kind}-src and --{kind}-tgt must be given together (got only "
                          f"--{kind}-{'src' if src else 'tgt'})")
    return (src, tgt) if src else None


def _load_files(cfg: DataConfig) -> DatasetSplits:
    """Explicit files in the direction given (the *_src files are in cfg.src_lang); without dev files,
    `FILES_DEV_SIZE` random training pairs are the dev set."""
    if cfg.upsample:
        raise ConfigError(f"--upsample {cfg.upsample!r} names corpora of a --recipe; --train-src/--train-tgt are "
                          "one corpus, whose repeated pairs are dropped as duplicates, so it cannot be weighted")
    train_files, dev_files, test_files = (_pair_of_flags(cfg, k) for k in ("train", "dev", "test"))
    if train_files is None:
        raise ConfigError("dev/test files were given without training files: add --train-src and --train-tgt "
                          "(or drop the file flags to use --recipe)")
    for flag, path in cfg.input_paths().items():
        if path and flag.endswith(("-src", "-tgt")) and os.path.exists(path) and not (os.path.isfile(path) or
                                                                                      os.path.isdir(path)):
            logger.warning("%s %s is not a regular file (a pipe?): it can be read only once, so this run cannot be "
                           "resumed nor its data read again by nmt-evaluate; give a file to be able to", flag, path)
    skip = cfg.skip_invalid_utf8
    train = read_parallel(*train_files, skip_invalid_utf8=skip, name="train")
    dev = read_parallel(*dev_files, skip_invalid_utf8=skip, name="dev") if dev_files else None
    tests = {"test": read_parallel(*test_files, skip_invalid_utf8=skip, name="test", whole=True)} if test_files else {}
    for kind, pairs in (("train", train), ("dev", dev), ("test", tests.get("test"))):
        if pairs is not None:
            check_languages(pairs.src, pairs.tgt, cfg.src_lang, tuple(
                f"--{kind}-{side} {getattr(cfg, f'{kind}_{side}')}" for side in ("src", "tgt")),
                f"--src {cfg.src_lang} --tgt {cfg.tgt_lang}")
    if dev is not None:
        warn_dev_in_tests(dev, tests, f"--dev-src {dev_files[0]} / --dev-tgt {dev_files[1]}")
    held_out = [p for p in (dev, *tests.values()) if p is not None]
    drops: Counter = Counter()
    for p in (train, *held_out):
        drops.update(p.dropped)
    train, counts = clean_training_pairs(train, held_out, max_chars=cfg.max_chars, max_ratio=cfg.max_ratio,
                                         where=" / ".join(train_files))
    drops.update(counts)
    _none_left(train, train_files, drops)   # (before the dev set's advice: test files = training's leave none)
    if dev is None:   # held out of the training pairs, as a recipe's
        if len(train) <= 2 * FILES_DEV_SIZE:
            raise TooFewPairs(f"{train_files[0]} / {train_files[1]}: {len(train)} training pairs after cleaning"
                              f" ({_dropped(drops) or 'none dropped'}), too few to hold out {FILES_DEV_SIZE} for dev; "
                              "give a dev set with --dev-src/--dev-tgt", len(train), 2 * FILES_DEV_SIZE + 1)
        before = len(train)   # (the pairs sharing a side with a dev pair are dropped from training too: 147 of 2,500)
        train, dev = _hold_out_dev(train, FILES_DEV_SIZE, FILES_DEV_SEED, cfg, drops)
        out = before - len(train)
        large = out / before > 0.05   # (a warning past 5%, as for pairs the filters drop)
        logger.log(logging.WARNING if large else logging.INFO, "no --dev-src/--dev-tgt: %d random training pairs are "
                   "the dev set%s: %d (%.0f%% of them) not trained on (seed %d; nmt-evaluate --dev-set scores them)%s",
                   len(dev), f" and {out - len(dev)} share a side with one" * (out > len(dev)), out, 100 * out / before,
                   FILES_DEV_SEED, "; give a dev set with --dev-src/--dev-tgt to train on them" if large else "")
    _none_left(train, train_files, drops)
    return DatasetSplits(train, dev, tests, dict(drops))


def _dropped(drops: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(drops.items()))


def _none_left(train: Pairs, files, drops: Counter) -> None:
    if not len(train):
        raise TooFewPairs(f"{files[0]} / {files[1]}: no training pairs left after filtering ({_dropped(drops)})", 0, 1)
