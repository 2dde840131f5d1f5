"""What the decoding commands (`nmt-translate`, `nmt-evaluate`, `nmt-score`, in `nmt.cli_decode`) share: the model
and decoding flags, whose defaults come from the model's saved config, loading the Translator they ask for, and
their outputs (stdout or a file, never one of the inputs; a reader that went away).
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Iterator

from nmt.flags import DECODE_FLAGS
from nmt.commands import Once, nonempty
from nmt.config import Config, ConfigError


class _Once(argparse.Action):
    """--model-dir, which a second time would silently replace the first (Sockeye's and Marian's -m take several
    models as an ensemble; here that is --ensemble)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} is given twice: give one, and the models that decode with it as an "
                         f"ensemble after --ensemble ({option_string} A --ensemble B C)")
        setattr(namespace, self.dest, values)


def add_model_decode_args(p: argparse.ArgumentParser, flags=DECODE_FLAGS, nbest: bool = True) -> None:
    """--model-dir, --checkpoint, --gpus and the decoding `flags`, whose defaults come from the model's config.json."""
    g = p.add_argument_group("model")
    g.add_argument("--model-dir", required=True, type=nonempty(Path), action=_Once,
                   help="model directory written by nmt-train")
    g.add_argument("--checkpoint", action=Once, default="best", metavar="WHICH", type=nonempty(),
                   help="best, latest, avg or a step number (default: best)")
    g.add_argument("--ensemble", nargs="+", action="extend", type=nonempty(Path), default=[], metavar="DIR",
                   help="further model directories (same languages and vocabularies) that decode together with "
                        "--model-dir, following the mean of their log-probabilities; --checkpoint applies to all; "
                        "each model once (not a copy or an export of another member's checkpoint)")
    g.add_argument("--gpus", type=nonempty(),
                   help="decode on GPUs: a count or ids as for training; batches are shared among them (omit for CPU)")
    g.add_argument("--cpu-devices", type=int, default=1, metavar="N",
                   help="without --gpus: decode on N CPU contexts side by side, each with its own copy of the model "
                        "(set OMP_NUM_THREADS to cores / N; default 1)")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="also log the checkpoint loaded and the settings in effect (nmt-translate: each chunk's "
                        "time)")
    d = p.add_argument_group("decoding (defaults: the model's saved decode config)")
    for f in flags:
        d.add_argument(f.flag, dest=f"decode.{f.field}", type=f.type, default=argparse.SUPPRESS,
                       metavar=f.field.upper(), help=f.help)
    if nbest:
        d.add_argument("--nbest", dest="decode.nbest", type=int, default=argparse.SUPPRESS, metavar="K",
                       help="output the K best translations with their scores, one JSON object per input line")


def load_translator(args: argparse.Namespace, search: bool = True):
    """A Translator for --model-dir/--checkpoint on the requested device, decode flags over the saved config;
    `search`: whether it will run beam search (not nmt-score's forced scoring, nor --sample), whose width is checked."""
    import dataclasses
    from nmt import checkpoint as ckpt
    from nmt.log import setup_logging
    from nmt.parallel import parse_devices
    from nmt.search import search_too_wide
    from nmt.translate import Translator
    setup_logging(None, level=logging.DEBUG if args.verbose else logging.INFO)
    for model_dir in args.ensemble:
        ckpt.config_of(model_dir, "--ensemble")
    path = ckpt.config_of(args.model_dir, "--model-dir")
    overrides = {k.split(".", 1)[1]: v for k, v in vars(args).items() if k.startswith("decode.")}
    overrides.setdefault("nbest", 1)   # (--nbest is each command's: a decode.nbest saved by training is no default)
    decode = dataclasses.replace(Config.load(path).decode, **overrides)
    ctxs = parse_devices(args.gpus, args.cpu_devices)
    tr = Translator.from_dir(args.model_dir, args.checkpoint, ctx=ctxs, decode=decode, ensemble=args.ensemble)
    named = {f: flag if f in overrides else f"decode.{f}"   # (a value of the model's config.json)
             for f, flag in (("beam_size", "--beam-size"), ("batch_size", "--decode-batch-size"))}
    too_wide = search_too_wide(decode.beam_size, decode.batch_size, tr.tgt_tok.vocab_size, named["beam_size"],
                               named["batch_size"])
    if too_wide and search and getattr(args, "sample", None) is None:
        saved = len(overrides.keys() & named.keys()) < 2
        raise ConfigError(too_wide + (f" (decode.*: {path}'s; --beam-size and --decode-batch-size override it)"
                                      if saved else ""))
    step = lambda s: "an average of checkpoints" if s is None else f"step {s}"   # noqa: E731  (params.avg: no step)
    members = "".join(f" + {d} ({step(s)})" for d, s in zip(tr.member_dirs, tr.member_steps))
    sample, seed = getattr(args, "sample", None), getattr(args, "seed", None)
    kept = (("max_len_a", "max_len_b") if sample is not None else ("length_penalty_alpha",) if not search else None)
    logging.getLogger("nmt.translate").debug(   # (sampling: the length limits; nmt-score: the length penalty)
        "%s: checkpoint %s (%s, %s)%s on %s; %s%s", args.model_dir, tr.checkpoint, tr.params_file.name,
        step(tr.params_step), members, ", ".join(map(str, ctxs)), "" if sample is None else
        f"sampling from the {f'{sample} most probable tokens' if sample else 'whole vocabulary'}, seed "
        f"{1 if seed is None else seed}; ",
        ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(tr.decode).items()
                  if kept is None or k in (*kept, "batch_size", "max_input_tokens")))
    return tr


def open_output(stack, output):
    """The output stream: stdout (UTF-8: `nmt.commands.standard_streams`) for None or "-", else the file, opened in
    `stack` (gzip-compressed when named .gz: `output_opener`; its missing directories made, as nmt-evaluate's --json
    FILE's are) and checked as `stack` closes it (`_kept`); a CorpusError naming --output if it cannot be written."""
    from nmt.atomic import descriptor
    from nmt.textfile import CorpusError, output_opener
    if output in (None, "-"):
        return sys.stdout
    opener, fd = output_opener("--output", output), descriptor(output)
    if fd is None and not os.path.isfile(output):   # (an existing file is written where it is, as before)
        output_dir("--output", Path(output).parent, file=output, make=True)
    try:
        if fd is not None and opener is open:   # /dev/stdout, /dev/fd/3: through it (re-opened: `>> file` truncated)
            return stack.enter_context(os.fdopen(os.dup(fd), "wt", encoding="utf-8", newline="\n"))
        if fd is not None:
            return stack.enter_context(opener(stack.enter_context(os.fdopen(os.dup(fd), "wb")), "wt",
                                              encoding="utf-8", newline="\n"))
        out = stack.enter_context(opener(output, "wt", encoding="utf-8", newline="\n"))
    except OSError as e:
        raise CorpusError(f"--output {output}: cannot write ({e.strerror})") from None
    stack.push(_kept(output, out.fileno()))   # (last in, first out: while the file is open)
    return out


def _kept(output: str, fd: int):
    """An exit callback (`ExitStack.push`) for the file `output`, open as `fd`: once its writes ended well, a
    StorageError if the file was deleted meanwhile (it, or its directory: what was written went with it). The open
    file is asked, not its path: a file made again there is another, and a file moved, or a symbolic link on the path
    retargeted, still holds what was written where it went."""
    def check(exc_type, exc, tb) -> bool:
        from nmt.storage import StorageError
        if exc_type is not None:   # (its own error is said)
            return False
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:
            raise StorageError(f"--output {output}: the file was deleted while it was written (it, or its directory, "
                               f"was removed{'; the file there now is another' if os.path.lexists(output) else ''}): "
                               "what was written to it is lost")
        return False
    return check


def check_languages_of(tr, src, tgt, src_name: str, tgt_name: str) -> None:
    """CorpusError unless the source and target lines are in the model's languages (`languages.check_languages`); a
    warning where one side only is blank (`warn_one_sided_blanks`)."""
    from nmt.corpus import CorpusError, warn_one_sided_blanks
    from nmt.languages import check_languages, output_rows
    nbest, aligned = output_rows(tgt)   # (read as text: scored without a word)
    if max(nbest, aligned) > sum(1 for x in tgt if x.strip()) / 2:
        raise CorpusError(f"{tgt_name}: its lines are nmt-translate's " + (
            "n-best rows (JSON with \"translations\"), not one translation per line: extract them, e.g. the best with "
            "`jq -r '.translations[0] // \"\"'` (\"\": an empty line's row has none)" if nbest > aligned else
            "--alignment output (translation ||| word links): take the translations, e.g. `sed 's/ ||| [-0-9 ]*$//'`"))
    check_languages(src, tgt, tr.src_lang, (src_name, tgt_name), f"the model translates {tr.src_lang} -> {tr.tgt_lang}")
    warn_one_sided_blanks(src, tgt, src_name, tgt_name)


def refuse_overwriting(flag: str, output, inputs: dict, model_dirs=()) -> None:
    """ConfigError if the file `output` (of `flag`) is one of the files the command reads (`inputs`, by flag), or
    one of the files of `model_dirs` (config.json, params.best, scores.json ...): writing it would destroy them; a
    CorpusError if it is named as a compression other than gzip (`output_opener`)."""
    from nmt.atomic import descriptor
    from nmt.checkpoint import OWN_FILE
    from nmt.textfile import output_opener
    stdout = output in (None, "-")   # (`--input in.ko >> in.ko` translated its own output without end)
    named, status = (("standard output", lambda: os.fstat(1)) if stdout else
                     (f"{flag} {output}", lambda: _stat_as_made(output)))
    if not stdout:
        output_opener(flag, output)
        if len(os.fsencode(Path(output).name)) > 255:   # (found before any work, not after decoding)
            raise ConfigError(f"{flag} {output}: a file name of {len(os.fsencode(Path(output).name))} bytes, more than "
                              "a file system takes (255)" + ("; --hyp-dir names its files after the set: give a "
                                                            "shorter --name" if flag == "--hyp-dir" else ""))
    target = None if stdout else Path(os.path.realpath(output))   # (Path.resolve raised on a loop of links)
    for model_dir in model_dirs:   # (the files a run keeps there: checkpoint.OWN_FILE; also a hard link to one)
        own = [p for p in Path(model_dir).iterdir() if OWN_FILE.fullmatch(p.name)] if Path(model_dir).is_dir() else []
        if (target is not None and target.parent == Path(model_dir).resolve() and OWN_FILE.fullmatch(target.name)
                or _refuse_same(named, status, {p.name: str(p) for p in own}, check=False)):
            raise ConfigError(f"{named} is a file of the model directory {model_dir}: writing it would destroy what "
                              f"the model needs; {'write it elsewhere' if stdout else f'give another {flag}'}")
    _refuse_same(named, status, inputs)
    if not stdout:
        _writable(flag, output, descriptor(output))


def _writable(flag: str, output: str, fd) -> None:
    """ConfigError (CorpusError: `output_dir`), before any work, if the output `output` names a descriptor (`fd`) that
    is not open for writing, or is an --output file that cannot be written: opened only once a first line is read
    (`open_output`, which makes its directories), it would be said only after one is typed, or comes down a pipe."""
    import fcntl
    from nmt.storage import unwritable_file
    if fd is None and flag == "--output" and (why := unwritable_file(output)):   # (an existing one: written in place)
        raise ConfigError(f"{flag} {output}: {why}")
    if fd is None and flag == "--output" and not os.path.isfile(output):   # (nothing made or emptied here)
        output_dir(flag, Path(output).parent, file=output)
    if fd is None:
        return
    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        raise ConfigError(f"{flag} {output}: descriptor {fd} is not open; open it for writing ({fd}>file)") from None
    if mode == os.O_RDONLY:
        raise ConfigError(f"{flag} {output}: descriptor {fd} is open for reading only; open it for writing")


def _stat_as_made(path: str) -> os.stat_result:
    """os.stat of the file `path` names once its missing directories are made (`output_dir`): `gone/../in.ko` is
    in.ko, which the path reaches only then."""
    try:
        return os.stat(path)
    except FileNotFoundError:   # (links resolved first, as the kernel does: a made directory's ".." is its parent)
        return os.stat(os.path.realpath(path))


def _refuse_same(named: str, status, inputs: dict, check: bool = True) -> bool:
    """ConfigError if the output `named` (its file `status()`) is one of `inputs` (flag -> path, "-": standard input):
    the same regular file (also through a link) or pipe (/dev/stdin as the output of a command reading it); without
    `check`, whether it is."""
    try:
        out = status()
    except OSError:
        return False
    if not (stat.S_ISREG(out.st_mode) or stat.S_ISFIFO(out.st_mode)):   # (a terminal is read and written at once)
        return False
    for source, path in inputs.items():   # "-": standard input (also redirected from a file: `< in.ko`)
        try:
            read = os.fstat(0) if path == "-" else os.stat(path) if path is not None else None
        except OSError:
            continue
        if read is None or (read.st_dev, read.st_ino) != (out.st_dev, out.st_ino):
            continue
        if check:
            what = f"the {source} file" if path != "-" else f"this command's standard input ({source})"
            raise ConfigError(f"{named} is {what}: writing it would " + (
                "destroy what this command reads" if stat.S_ISREG(out.st_mode) else
                "feed the output back into what this command reads, without end") + "; write it elsewhere")
        return True
    return False


def output_dir(flag: str, path: Path, file: str = "", make: bool = False) -> Path:
    """`path` found writable, or where it would be made (with its parents), before any work, so that an output that
    cannot be written is an error naming `flag` at once rather than after decoding; made only with `make`, as the
    output is opened (its atomic writes make it too): a command refused after the check leaves nothing on disk.
    `file`: the output of `flag` that goes there."""
    from nmt.atomic import descriptor
    from nmt.corpus import CorpusError
    from nmt.storage import check_writable, existing_ancestor
    if file and descriptor(file) is not None:   # (written through the descriptor: nothing is made beside it)
        return path
    if file and os.path.isdir(file):
        raise CorpusError(f"{flag} {file} is a directory: give the file to write")
    if file and os.path.exists(file) and not os.path.isfile(file):
        if not os.access(file, os.W_OK):   # a device or a pipe (/dev/stdout) is written as it is (nmt.atomic)
            raise CorpusError(f"{flag} {file}: cannot write it (permission denied)")
        return path
    try:
        if make:
            path.mkdir(parents=True, exist_ok=True)
        elif not existing_ancestor(path).is_dir():   # (as mkdir would fail)
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    except OSError as e:
        where = f"{file}: cannot make its directory {path}" if file else f"{path}: cannot make the directory"
        why = ("a file is in its path" if isinstance(e, NotADirectoryError) or isinstance(e, FileExistsError) and
               os.path.exists(e.filename or path) else e.strerror)   # (--hyp-dir afile said "File exists")
        raise CorpusError(f"{flag} {where} ({why})") from None
    check_writable(path, flag, shown=file or None)
    return path


@contextlib.contextmanager
def output_errors(output) -> Iterator[None]:
    """Around the writes to `output` (a file; standard output for None or "-", flushed here): a full disk, a
    read-only or forbidden file is a StorageError naming it rather than a traceback (a file deleted while written:
    `open_output`). A reader that went away from standard output (BrokenPipeError) passes through, for
    `reader_gone`."""
    from nmt.storage import StorageError, is_fixable, write_failure
    stdout = output in (None, "-")
    try:
        yield
        if stdout:
            sys.stdout.flush()
    except OSError as e:
        if not is_fixable(e) or e.filename not in (None, output):   # (another file's: not the output's to say)
            raise
        if not stdout:
            raise write_failure(output, e) from None
        _discard_stdout()   # what is left unwritten goes nowhere, not into a traceback at exit
        if e.errno == errno.EFBIG:   # (a size limit: `ulimit -f`)
            raise write_failure("the standard output", e) from None
        raise StorageError(f"cannot write the standard output: {e.strerror}") from None


def _discard_stdout() -> None:
    """Standard output goes to /dev/null from now on: nothing more can be written where it went."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def last_lines(lines) -> bool:
    """Print a command's last `lines` on standard output once its work is done (nmt-train's scores, nmt-export's
    summary): False when the reader went away (`| head`; `reader_gone` then), a StorageError for a full one."""
    try:
        with output_errors(None):
            for line in lines:
                print(line)
        return True
    except BrokenPipeError:
        return False


def reader_gone() -> int:
    """After a BrokenPipeError on stdout (e.g. `| head`): nothing more to write; exit code 141 as a shell's."""
    _discard_stdout()
    return 141


def misaligned(src_file, src: list, flag: str, other_file, other: list, other_is: str, src_is: str):
    """The CorpusError for --src-file and `flag` files of different line counts (`other_is` / `src_is`: how the
    message names the two sides)."""
    from nmt.corpus import CorpusError
    return CorpusError(f"line counts differ: --src-file {src_file} has {len(src)} line{'s' * (len(src) != 1)} but "
                       f"{flag} {other_file} has {len(other)}; they must be line-aligned (line i of {other_is} "
                       f"translates line i of {src_is})")


def installed_commands(*names: str) -> str:
    """Where pip installed the console scripts `names`, when the first is not on the PATH (a `pip install --user`'s
    ~/.local/bin, a virtual environment not activated), as words to add to a message; "" when it is, or none is
    found."""
    import shutil
    import sysconfig
    if shutil.which(names[0]):
        return ""
    for scheme in ({}, {"scheme": f"{os.name}_user"}):
        where = Path(sysconfig.get_path("scripts", **scheme))
        if (where / names[0]).is_file():
            return f" (not on the PATH: {', '.join(str(where / n) for n in names)})"
    return ""
