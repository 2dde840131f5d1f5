"""Command lines: argparse groups mapped onto the config dataclasses in one place.

Precedence: dataclass defaults < `--config FILE` (JSON, same layout as a model's config.json) < explicit flags.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type

from nmt.config import (ARCH_DEFAULTS, CORPUS_FILES, Config, ConfigError, DataConfig, ModelConfig, SettingsClash,
                        flag_name)
from nmt.config_resume import (PER_INVOCATION, record_mirror, refused_batch_kind, refused_change, resumed_config,
                               run_clash)
from nmt import jsonio
from nmt.cli_io import last_lines, reader_gone
from nmt.commands import CommandParser, Once, command, nonempty, shell_word, usable_streams
from nmt.config_file import check_taken_dir, read_config_file, warn_fine_tuned, warn_other_arch, warn_time_limit
from nmt.flags import GROUPS, MODEL_FLAGS


class _Joined(argparse.Action):
    """--upsample given again adds its corpora to the first's (Marian's repeated options add up) instead of
    silently replacing them; a corpus named twice is refused where the value is read (`recipes.parse_upsample`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, f"{before},{values}" if before else values)


def _add_flags(parser: argparse.ArgumentParser, groups, defaults: Config) -> None:
    for title, flags in groups:
        g = parser.add_argument_group(title)
        for f in flags:
            default = getattr(getattr(defaults, f.section), f.field)
            dest = f"{f.section}.{f.field}"
            if f.boolean:
                g.add_argument(f.flag, dest=dest, action="store_const", const=not f.negate,
                               default=argparse.SUPPRESS, help=f.help)
            else:
                also = "".join(f"; with --arch {arch}: {v[f.section][f.field]}" for arch, v in ARCH_DEFAULTS.items()
                               if f.field in v.get(f.section, {}))
                kind = (_corpus_file if f.field in CORPUS_FILES else nonempty() if f.type is str and not f.choices
                        else f.type)
                action = _Joined if f.field == "upsample" else Once if f.field in CORPUS_FILES else "store"
                g.add_argument(f.flag, dest=dest, type=kind, choices=f.choices, action=action,
                               default=argparse.SUPPRESS, metavar=f.field.upper() if not f.choices else None,
                               help=f.help if default is None or "default" in f.help   # (it says what then)
                               else f"{f.help} (default: {default}{also})")


def _corpus_file(text: str) -> str:
    """An argparse type: a corpus file's path; "-" (standard input to the decoding commands) refused."""
    if text.strip() == "-":
        raise argparse.ArgumentTypeError("- (standard input) cannot be a corpus file: training reads its files more "
                                         "than once; give the file's path")
    return nonempty()(text)


def build_train_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="nmt-train", description="Train a Korean<->English seq2seq-attention model, data-parallel over devices.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n  nmt-train                       # Tatoeba ko->en on CPU\n"
               "  nmt-train --gpus 2 --batch-size 240\n"
               "  nmt-train --src en --tgt ko --recipe all --model-dir models/all-en-ko\n")
    g = p.add_argument_group("run")
    g.add_argument("--config", action=Once, type=nonempty(Path),
                   help="JSON config file (same layout as a model's config.json); flags override it")
    g.add_argument("--resume", action="store_true", help="continue training from the latest checkpoint in --model-dir")
    g.add_argument("--overwrite", action="store_true", help="delete an existing --model-dir and start over")
    g.add_argument("--init-from", metavar="DIR", type=nonempty(Path),
                   help="fine-tune: start a new run from the parameters of a trained model directory (its best, or "
                   "DIR/params.avg, DIR/params.<step>), keeping its model settings, languages and SentencePiece "
                   "models, with a fresh optimizer and learning-rate schedule")
    g.add_argument("--no-eval", action="store_true", help="skip the test-set evaluation at the end (of this "
                   "command: a --resume without it scores the test sets)")
    g.add_argument("--dry-run", action="store_true", help="check the configuration, data and model directory "
                   "(readable, clean, writable, room) and print what would be trained, without training")
    g.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    _add_flags(p, GROUPS, Config())
    return p


def config_from_args(args: argparse.Namespace, base: Optional[Config] = None) -> Config:
    """Defaults of the chosen --arch < --config file (or `base`) < explicit flags."""
    given = args_dict(args, base)   # (a --config file's own errors name its keys)
    try:
        return Config.from_dict(given, source=str(getattr(args, "config", "") or "flags"))
    except SettingsClash as e:   # (values that clash, the --config file's among them: it is named)
        raise type(e)(f"{args.config}: {e}" if clash_in_file(e, args) else str(e)) from None
    except ConfigError as e:   # a file's key with a flag's (merged): as the file's where the flag is another command's
        raise ConfigError(in_file_words(str(e), args)) from None


def clash_in_file(clash: SettingsClash, args: argparse.Namespace) -> bool:
    """Whether a --config file gives a value of `clash` (one of its `keys`, not given by a flag too; where it names
    none, any --config file): `--config lr.json --average-last 5`, of a file giving neither key, was "lr.json: ..."."""
    if not getattr(args, "config", None):
        return False
    given = given_keys(args)
    return not clash.keys or any(given.get(key, "").startswith(f"{args.config}: ") for key in clash.keys)


def in_file_words(message: str, args: argparse.Namespace) -> str:
    """`message` with each flag nmt-train does not have, of a key the --config file gives, as "FILE: section.key"."""
    own = {f.flag for _, flags in GROUPS for f in flags}
    for key, said in given_keys(args).items():
        flag = flag_name(*key.split("."))
        if said != flag and flag not in own:
            message = re.sub(rf"{re.escape(flag)}(?![\w-])", lambda _: said, message)
    return message


def args_dict(args: argparse.Namespace, base: Optional[Config] = None, check: bool = True
              ) -> Dict[str, Dict[str, Any]]:
    """The sections and keys a command line gives (with a --config file's, or `base`'s), not yet checked together:
    `config_from_args` makes them a Config; on --resume they first join the run's own (`config_for_resume`).
    `check`: a --config file's values are checked (over `base`, or the defaults)."""
    if getattr(args, "config", None):
        d = read_config_file(args.config, base, check)
    else:
        d = base.to_dict() if base else {}
    flags = {key: value for key, value in vars(args).items() if "." in key}
    if "data.batch_size" in flags and "data.batch_tokens" in flags:   # --batch-tokens would override --batch-size
        raise ConfigError(f"--batch-size {flags['data.batch_size']} and --batch-tokens {flags['data.batch_tokens']} "
                          "contradict each other: a batch is counted in sentences (--batch-size) or in padded target "
                          "positions (--batch-tokens); give one of them")
    if getattr(args, "config", None) and check:
        warn_time_limit(args.config, d, flags)
        if not getattr(args, "resume", True):
            warn_fine_tuned(args.config, getattr(args, "init_from", None))
    for key, value in flags.items():
        section, field = key.split(".", 1)
        d.setdefault(section, {})[field] = value
    data = d.setdefault("data", {})
    if "data.batch_size" in flags or "data.batch_tokens" in flags:   # the flag's kind of batch over a file's other:
        data.pop("batch_tokens" if "data.batch_size" in flags else "batch_size", None)   # that one at its default
    if flags.get("data.recipe") and not any(f"data.{f}" in flags for f in CORPUS_FILES):   # over a --config file's
        data.update({f: None for f in CORPUS_FILES if data.get(f)})
    if data.get("train_src") or data.get("train_tgt"):
        if flags.get("data.recipe") or base is None and data.get("recipe") and "data.train_src" not in flags:
            said = "--recipe" if flags.get("data.recipe") else f"{args.config}: data.recipe"   # (both in the file)
            raise ConfigError(f"{said} {data['recipe']} and --train-src/--train-tgt exclude each other: a recipe "
                              "brings its own corpora; give a recipe, or your own files")
        if base is None or data.get("recipe") == base.data.recipe:   # (on --resume, a --config file's other
            data["recipe"] = None   # recipe is left for resumed_config to compare with the run's)
    if getattr(args, "init_from", None) and not getattr(args, "resume", False):
        from nmt.finetune import kept_settings
        kept_settings(d, Path(args.init_from), given_keys(args))
    train, arch = d.setdefault("train", {}), d.get("model", {}).get("arch", "lstm")
    if base is not None and "train.model_dir" not in flags:   # --resume: where the run's config.json is (a --config
        train["model_dir"] = base.train.model_dir   # file's may be relative to another directory)
    if "train.model_dir" in flags or base is not None:
        return d
    if "model_dir" not in train:   # named after the data and the architecture: another never lands in the LSTM's
        langs = data.get("src_lang", DataConfig.src_lang), data.get("tgt_lang", DataConfig.tgt_lang)
        name = f"{data.get('recipe', DataConfig.recipe) or 'custom'}-{langs[0]}-{langs[1]}"
        train["model_dir"] = str(Path("models") / (name if arch == "lstm" else f"{name}-{arch}"))
    else:
        train["model_dir"] = check_taken_dir(str(train["model_dir"]), Path(args.config), getattr(args, "resume", True),
                                             getattr(args, "overwrite", False))
    return d


def given_keys(args: argparse.Namespace) -> Dict[str, str]:
    """The config keys this command line sets, each as the user gave it: its flag, or "FILE: key" of --config."""
    given = {}
    if getattr(args, "config", None):
        given = {f"{section}.{name}": f"{args.config}: {section}.{name}" for section, values in
                 jsonio.read_object(args.config, ConfigError).items() if isinstance(values, dict) for name in values}
    for _, flags in GROUPS:
        for f in flags:
            key = f"{f.section}.{f.field}"
            if key in vars(args) and (not f.boolean or getattr(args, key) == (not f.negate)):
                given[key] = f.flag
    return given


def config_for_resume(args: argparse.Namespace) -> Tuple[Config, List[str]]:
    """On --resume: the run's saved configuration, with what this command line gives, and the changes
    (`resumed_config`), so that `--resume` alone continues a run as it was started; the flags are checked together
    with the run's settings (`--average-last 5` alone, in a run that keeps 5 checkpoints). The command line's own
    configuration where the model directory has no config.json here (nothing to resume, which training reports; or
    a worker of a distributed job on a machine without the directory, which then takes rank 0's settings with its
    flags on top: `nmt.resume.rank0_settings`)."""
    from nmt.checkpoint import CONFIG
    asked = args_dict(args, check=False)   # (the flags over a --config file's; checked below)
    path = Path(asked["train"]["model_dir"]).expanduser() / CONFIG
    if not path.is_file():
        with without_run(True, path.parent, asked["train"].get("kvstore", ""), SettingsClash):
            return config_from_args(args), []
    saved = Config.load(path)
    try:   # a config.json edited by hand: its model settings, in the flags' words
        check_model(saved.model, {})
    except ConfigError as e:
        raise ConfigError(f"--resume: {path}: {e}") from None
    refused_batch_kind(asked.get("data", {}), given_keys(args), saved, path)
    # the flags (and a --config file) over the run's settings, its per-invocation keys at their defaults
    base, defaults = saved.to_dict(), Config.for_arch(saved.model.arch).to_dict()
    for key in PER_INVOCATION:
        section, name = key.split(".")
        base[section][name] = defaults[section][name]
    base["train"]["model_dir"] = str(path.parent)
    run = Config.from_dict(base, source=str(path))
    try:
        wanted = config_from_args(args, base=run)
    except SettingsClash as e:   # `--src en` alone (or a --config file's), in a ko-en run, meets its target: the
        given, asked = given_keys(args), args_dict(args, run, check=False)   # language that cannot change
        for key in ("data.src_lang", "data.tgt_lang"):
            refused = key in given and refused_change(key, given[key], asked["data"][key[5:]], saved, str(path))
            if refused:
                raise ConfigError(refused) from None
        # (`--keep-last 1` alone, under the run's --average-last 3, or `--average-last 6` over its --keep-last 5)
        raise type(e)(run_clash(e, saved, asked["train"], given, str(path))) from None
    check_model_flags(saved.model.arch, given_keys(args), wanted.model)   # before "differs from" an unused default
    return resumed_config(saved, wanted, given_keys(args), str(path))


@contextlib.contextmanager
def without_run(resume: bool, model_dir, kvstore: str, kind: Type[ConfigError] = ConfigError) -> Iterator[None]:
    """On a distributed --resume (`resume`, a `kvstore` dist_*) whose run's config.json is not on this machine (in
    `model_dir`; a missing run elsewhere is "nothing to resume", which training says): an
    error of `kind` raised by the block, which checked the flags by themselves over the defaults, said so. A worker
    of a distributed job without the model directory learns the run's settings from rank 0 only once the job has
    started (`nmt.resume.rank0_settings`): `--average-last 5` alone, a --keep-last 5 run's, was "give --keep-last 5 or
    more (got 3)" there, and `--heads 4` alone, a Transformer's, "not an option of --arch lstm"."""
    from nmt.checkpoint import CONFIG
    path = Path(model_dir).expanduser() / CONFIG
    alone = resume and str(kvstore).startswith("dist") and not path.is_file()
    try:
        yield
    except kind as e:
        if not alone:
            raise
        raise type(e)(f"{e} ({path} is not on this machine, so these flags were checked by themselves, over the "
                      "defaults rather than a run's settings: a worker of a distributed job on a machine without the "
                      "model directory learns the run's from rank 0 only once the job has started, so it needs the "
                      "flags these depend on too, as the run's first command gave them, or a copy of the model "
                      "directory)") from None


def check_model_flags(arch: str, given: Dict[str, str], model: Optional[ModelConfig] = None,
                      init: Optional[Path] = None) -> None:
    """ConfigError for a model flag given that `arch` does not read (`Seq2SeqModel.config_fields`): saved in
    config.json, it would change nothing, without a word; with `model`, for a --config file's such key not at its
    default too (a model directory's config.json, a natural --config, holds every field), but under an --arch flag
    (a run's config.json of the other architecture): then it is set back to its default in `model`, with a warning.
    `init`: the --init-from parameter file whose model is of `arch` (named as such, not as an --arch flag)."""
    from nmt.finetune import tunable
    from nmt.models import ARCHITECTURES   # imports mxnet, which training needs anyway
    fields = ARCHITECTURES[arch].config_fields if arch in ARCHITECTURES else ()
    of = f"--arch {arch}" if init is None else (f"the {arch} model of --init-from {init} (model.arch in "
                                                f"{init.parent / 'config.json'})")
    unread = []   # with --arch over a file of another architecture (a run's config.json): that one's settings
    for key, flag in given.items():
        section, field = key.split(".", 1)
        if not fields or section != "model" or field in (*fields, "arch", "shared_vocab"):
            continue
        owners = " or ".join(f"--arch {a}" for a, c in sorted(ARCHITECTURES.items()) if field in c.config_fields)
        mine = fields if init is None else tunable(arch)   # (a fine-tuning run keeps the model's other settings)
        named = ", ".join(f.flag for f in MODEL_FLAGS if f.field in mine and not f.negate) or "none"
        theirs = (f"the model flags of --arch {arch}: " if init is None else
                  "the model flags a fine-tuning run of it may change: ") + named
        if flag.startswith("--"):
            raise ConfigError(f"{flag} is an option of {owners or 'another architecture'}, not of {of}, "
                              f"which would ignore it; {theirs}")
        if model is not None and (value := getattr(model, field)) != getattr(ModelConfig, field):
            if given.get("model.arch", "").startswith("--"):
                unread.append(f"{flag.rsplit(': ', 1)[-1]} {json.dumps(value)}")
                setattr(model, field, getattr(ModelConfig, field))   # (config.json saves the default, unread)
                continue
            raise ConfigError(f"{flag} {json.dumps(value)} is a setting of {owners or 'another architecture'}, not "
                              f"of {of}, which would ignore it: leave it out of the file; {theirs}")
    if unread:
        print(f"warning: --arch {arch} does not read the --config file's {', '.join(unread)}", file=sys.stderr)


def check_model(model: ModelConfig, given: Dict[str, str]) -> None:
    """The architecture's own checks of the model settings before any data is read (`build_model` over a 4-piece
    vocabulary: no arrays are made); a value from a --config file is named by the file and key, as any other."""
    from nmt.models import build_model
    try:
        build_model(model, 4, 4)
    except ConfigError as e:
        key = next((k for k in given if k.startswith("model.") and f"--{k[6:].replace('_', '-')} " in f"{e} "
                    and not given[k].startswith("--")), None)   # a key of a --config file the message names
        raise ConfigError(f"{given[key]}: {e}" if key else str(e)) from None


def training_run(args: argparse.Namespace) -> Tuple[Config, List[str], Optional[Path]]:
    """What a training command line asks for: the configuration (on --resume the run's own with this command's
    changes, listed; with --init-from the model's settings), and the parameter file of --init-from."""
    cfg, changes = config_for_resume(args) if args.resume else (config_from_args(args), [])
    record_mirror(cfg, args.resume)   # $NMT_DATA_DIR, recorded as --data-dir is
    init = None
    if args.init_from is not None:
        from nmt.finetune import init_config, init_params
        if args.resume:
            raise ConfigError("--init-from starts a new run from a trained model and --resume continues the run in "
                              "--model-dir: give one of them")
        init = init_params(args.init_from)
        check_model_flags(Config.load(init.parent / "config.json").model.arch, given_keys(args), cfg.model, init)
        cfg = init_config(cfg, given_keys(args), init)
    given = given_keys(args)
    config = getattr(args, "config", None)   # an --arch flag naming the file's own (LSTM unless named): no change
    if config and given.get("model.arch", "").startswith("--") and jsonio.read_object(config, ConfigError).get(
            "model", {}).get("arch", ModelConfig.arch) == cfg.model.arch:
        given["model.arch"] = f"{config}: model.arch"
    with without_run(args.resume, cfg.train.model_dir, cfg.train.kvstore):   # (a worker without the run)
        check_model_flags(cfg.model.arch, given, cfg.model)
        check_model(cfg.model, given)
    if config and "model.arch" in given and given["model.arch"].startswith("--"):
        warn_other_arch(cfg, given, args.config)
    cfg.labels = given   # (a resumed run's log names its changes as `changes` does)
    return cfg, changes, init


@command(build_train_parser)
def train_main(args: argparse.Namespace) -> int:
    from nmt.signals import INTERRUPTS
    from nmt.train import run_training
    cfg, changes, init = training_run(args)
    own = Path(cfg.train.model_dir) / "config.json"   # (the run's own settings go with the run --overwrite replaces)
    if args.overwrite and getattr(args, "config", None) and Path(args.config).resolve() != own.resolve():
        from nmt.dirlock import check_outside
        check_outside(Path(cfg.train.model_dir), {"--config": args.config})
    # a corpus file on a closed stdin would read as empty; a dry run's report is its output
    usable_streams([getattr(cfg.data, f) for f in CORPUS_FILES if getattr(cfg.data, f)], ["-"] if args.dry_run else [])
    if args.verbose:
        logging.getLogger("nmt").setLevel(logging.DEBUG)
    if args.dry_run:   # what training logs as it reads the data (each filter's drops) goes to the console too
        from nmt.log import setup_logging
        from nmt.preflight import describe, dry_run
        setup_logging(None)
        report = describe(dry_run(cfg, resume=args.resume, overwrite=args.overwrite, init=init))
        said = [f"settings changed since the last run: {'; '.join(changes)}"] if changes else []
        return 0 if last_lines([report, *said]) else reader_gone()
    result = run_training(cfg, resume=args.resume, overwrite=args.overwrite, evaluate=not args.no_eval, params=init)
    state = result.state
    lines = []
    for which, scores in (("best checkpoint", result.test_scores), ("params.avg", result.average_scores)):
        for name, sc in scores.items():
            lines.append(f"{name}: {sc.summary()} ({sc.n} sentences, {which}, beam {cfg.decode.beam_size}, length "
                         f"penalty {cfg.decode.length_penalty_alpha:g})")
            lines += [f"  {sig}" for sig in (sc.bleu_signature, sc.chrf_signature, *sc.extra_signatures.values())]
    shown = last_lines(lines)
    saved = f"checkpoint saved in {cfg.train.model_dir}" if not result.rank else "rank 0 saved the checkpoint"
    if state.stopped in INTERRUPTS:
        print(f"stopped by {state.stopped} at step {state.step}; {saved}. Continue with --resume.", file=sys.stderr)
    elif result.interrupted:   # it came as training ended by its own limit, before the test sets were scored
        print(f"{result.interrupted} received as training ended ({state.stopped} at step {state.step}); {saved}" +
              ("" if args.no_eval else "; no test set was scored (`nmt-evaluate --model-dir "
                                       f"{shell_word(cfg.train.model_dir)} --recipe-tests` scores them)"),
              file=sys.stderr)
    return INTERRUPTS.get(result.interrupted, 0) or (0 if shown else reader_gone())


if __name__ == "__main__":   # `python -m nmt.cli`: nmt-train (it did nothing, exit 0)
    raise SystemExit(train_main())
