"""What every `nmt-*` command shares: argparse types that name the flag in their errors (`number`, `nonempty`), a
parser whose flag errors are one `error: ...` line (`CommandParser`), and the entry point of a command (`command`),
which prints bad input as one `error: ...` line with exit code 2 (`run_cli`, `user_errors`) rather than a traceback."""
from __future__ import annotations

import argparse
import contextlib
import errno
import io
import logging
import math
import os
import re
import shlex
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, List, Optional

from nmt.config import ConfigError


def number(kind: type, low: float, high: Optional[float] = None, low_open: bool = False):
    """An argparse type: a `kind` (int or float) >= `low` (> with `low_open`) and <= `high`; argparse names the flag
    in its error."""
    def parse(text: str):
        try:
            value = kind(text)
            if not math.isfinite(value):
                raise ValueError(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a finite number'}"
                                             ) from None
        if value < low or (low_open and value == low) or (high is not None and value > high):
            bound = f"> {low}" if low_open else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}" + (f" and <= {high}" if high is not None else "")
                                             + f" (got {text})")
        return value
    return parse


def nonempty(kind: Callable[[str], Any] = str):
    """An argparse type: `kind` of a value that is not blank. `--data-dir "$DIR"` with DIR unset gives '', which
    would otherwise mean the current directory (a Path) or no value at all. A Path's "~" is the home directory
    (the shell leaves it in `--model-dir=~/m`)."""
    def parse(text: str):
        if not text.strip():
            raise argparse.ArgumentTypeError("is empty (an unset shell variable?): give a value, or leave the flag out")
        value = kind(text)
        return value.expanduser() if isinstance(value, Path) else value
    return parse


class CommandParser(argparse.ArgumentParser):
    """The parser of every `nmt-*` command: a flag error (a value out of range, a missing or unknown flag) is one
    `error: ...` line naming the flag, exit code 2, as every other bad input of the commands (`run_cli`); argparse
    printed its usage block before "prog: error: ..." for these alone. An unknown flag's line says where the flags
    are listed (`unrecognized`), as the usage block did (GNU tools: "Try 'ls --help'")."""

    def error(self, message: str):
        self.exit(2, f"error: {message}\n")

    def parse_args(self, args=None, namespace=None):   # (argparse's, with `unrecognized`'s words)
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.error(self.unrecognized(extra))
        return parsed

    def unrecognized(self, extra: List[str]) -> str:
        """argparse's error for the `extra` arguments no flag took, with where the command's flags are listed."""
        return f"unrecognized arguments: {' '.join(extra)} (`{self.prog} --help` lists the flags)"


class Once(argparse.Action):
    """A flag that a second time would silently replace the first (`--src-file a.ko --ref-file a.en --src-file
    b.ko ...` scored b.ko against both references): refused, naming both values."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = f"_once_{self.dest.replace('.', '_')}"   # (no ".": nmt-train takes the dotted names for its flags)
        if getattr(namespace, seen, None) is not None:
            parser.error(f"{option_string} is given twice ({getattr(namespace, seen)} and {values}): give it once")
        setattr(namespace, seen, values)
        setattr(namespace, self.dest, values)


def shell_word(path) -> str:
    """`path` as a word of a command given to paste into a shell: quoted where needed (spaces, quotes), and not
    taken for an option (a leading "-": ./-name)."""
    text = str(path)
    return shlex.quote(text if not text.startswith("-") else f"./{text}")


def file_arg(text: str) -> str:
    """A file named by a flag, kept as text ("-" is standard input or output), with "~" as the home directory."""
    return os.path.expanduser(text)


def user_errors() -> tuple:
    """Exception classes that mean bad input: printed as one clear line, never as a traceback."""
    from nmt.batching import BatchError
    from nmt.checkpoint import CheckpointError
    from nmt.corpus import CorpusError
    from nmt.parallel import DeviceError
    from nmt.storage import StorageError
    from nmt.tokenizer import TokenizerError
    return (ConfigError, CorpusError, CheckpointError, DeviceError, TokenizerError, BatchError, StorageError)


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP) taken as an interruption (`nmt.signals`): the command ends as by Ctrl-C, with the signal's
    exit code."""
    def __init__(self, signum: int = 15) -> None:
        super().__init__()
        self.exit_code = 128 + signum


@contextlib.contextmanager
def typed_interrupt(typed: bool = True):
    """Around lines `typed` at a terminal: a Ctrl-C's "interrupted" (`run_cli`) on a line of its own, not glued to the
    "^C" the terminal echoed (at the prompt, while a line is translated, after a half-typed line)."""
    try:
        yield
    except KeyboardInterrupt as e:
        if typed and not isinstance(e, Terminated):   # (SIGTERM, SIGHUP: a log line of their own says them)
            print(file=sys.stderr)
        raise


# The names a file flag may give standard input or output by; None: the flag left out (its default, the stream).
STDIN_NAMES = (None, "-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0")
STDOUT_NAMES = (None, "-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
STDERR_NAMES = ("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2")   # (a file flag's; never its default)
CLOSED: set = set()   # the standard streams ("stdin", "stdout", "stderr") this command was started without


class _WholeWrites(io.FileIO):
    """A file whose write() writes all it is given, or raises: FileIO's may write a part and say so, which the text
    layer of an unbuffered standard output does not look at."""

    def write(self, data) -> int:
        view, done = memoryview(data).cast("B"), 0
        while done < len(view):
            done += super().write(view[done:])
        return done


def standard_streams() -> None:
    """Each standard stream the command was started without (`<&-`, `>&-`, `2>&-`) gets /dev/null: no file the
    command opens takes its descriptor (C libraries write their messages to fd 2), and print and tqdm do not fall
    back to stdout (they put log lines among the translations); a closed stdin or stdout is recorded for
    `usable_streams`, a closed stderr's messages go nowhere. Standard output writes UTF-8 whatever the locale, and a
    file name's bytes that are not UTF-8 (lone surrogates in Python's names) as they are."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)   # the lowest free descriptor: this one
            setattr(sys, name, open(os.devnull, "r" if fd == 0 else "w", encoding="utf-8"))
            CLOSED.add(name)
    if sys.stdout is sys.__stdout__ and isinstance(getattr(sys.stdout, "buffer", None), io.FileIO) and \
            not os.isatty(1):   # unbuffered (PYTHONUNBUFFERED=1, -u): a short write (a pipe whose reader left,
        # `ulimit -f`) dropped the rest, unsaid. (A terminal keeps its own: input() edits lines only on fd 1.)
        sys.stdout = io.TextIOWrapper(_WholeWrites(os.dup(1), "w"), write_through=True)
    if hasattr(sys.stdout, "reconfigure"):   # (and stdin's typed lines UTF-8: undecodable bytes as surrogates)
        sys.stdout.reconfigure(encoding="utf-8", errors="surrogateescape")
    if hasattr(sys.stdin, "reconfigure") and "stdin" not in CLOSED:
        sys.stdin.reconfigure(encoding="utf-8", errors="surrogateescape")


def one_stdin(flags: dict) -> None:
    """ConfigError when more than one of `flags` (flag -> file) names standard input, which can be read once."""
    from nmt.config import ConfigError
    both = [f"{flag} {path}" for flag, path in flags.items() if path is not None and path in STDIN_NAMES]
    if len(both) > 1:
        raise ConfigError(f"{' and '.join(both)} all read standard input, which can be read once: give all but one "
                          "of them as files")


def usable_streams(inputs=(), outputs=()) -> None:
    """StorageError, before any work, when a file the command reads (`inputs`) or writes (`outputs`) is standard
    input, output or error (`STDIN_NAMES`, `STDOUT_NAMES`, `STDERR_NAMES`) and the command was started without it
    (the error goes nowhere then, but the exit code says it)."""
    from nmt.storage import StorageError
    for files, name, names, says, redirect, advice in (
            (inputs, "stdin", STDIN_NAMES, "input", "<&-", "give the input as a file"),
            (outputs, "stdout", STDOUT_NAMES, "output", ">&-", "redirect it to a file, or to /dev/null"),
            (outputs, "stderr", STDERR_NAMES, "error", "2>&-", "give the output as a file")):
        if name in CLOSED and any(f in names for f in files):
            raise StorageError(f"standard {says} is closed (the command was started with {redirect}): {advice}")


MXNET_PIP = "pip install 'mxnet==1.9.1' 'numpy>=1.21,<1.24'"   # the versions requirements/cpu.txt and common.txt pin


def first_line(e: BaseException) -> str:
    """The first line of an exception's message: a library's own several-line advice stays out of ours."""
    return (str(e).strip().splitlines() or [""])[0]


def missing_package(e: BaseException) -> str:
    """For a ModuleNotFoundError of a package nmt requires (uninstalled since): one line naming it and the pinned pip
    command; "" for any other error."""
    from importlib import metadata
    name = getattr(e, "name", None) or ""
    if not isinstance(e, ModuleNotFoundError) or not name:
        return ""
    try:
        requires = [r.split(";")[0].strip() for r in metadata.requires("nmt") or []]
    except metadata.PackageNotFoundError:   # (not installed: run from a checkout)
        return ""
    wanted = name.split(".")[0].lower().replace("_", "-")
    pins = [r for r in requires if re.split(r"[<>=!~\[ ]", r, maxsplit=1)[0].lower().replace("_", "-") == wanted]
    return f"{first_line(e)}, a package nmt needs (installed with it): pip install '{pins[0]}'" if pins else ""


def import_failure(e: BaseException) -> str:
    """The one-line error for `e` raised as MXNet (not installed, its module code failing with numpy 1.24 or later,
    its library not loadable: a CUDA build without CUDA) or a package nmt needs (`missing_package`) is imported; ""
    for any other error."""
    import importlib.util
    from nmt import mxnet_builds_problem
    builds = mxnet_builds_problem()   # the cause of an error of MXNet's import or `nmt.models`' refusal, not of others
    if builds and str(e) == builds:
        return builds
    try:
        spec = importlib.util.find_spec("mxnet")
    except (ImportError, ValueError):   # (a module entry of None: "not installed")
        spec = None
    root = os.path.dirname(spec.origin) + os.sep if spec and spec.origin else None
    frames = traceback.extract_tb(e.__traceback__)
    if getattr(e, "name", None) == "mxnet" or root and any(f.name == "<module>" and f.filename.startswith(root)
                                                           for f in frames):
        why = (f"its library needs shared libraries not found here: a CUDA build (mxnet-cu112) needs the NVIDIA "
               f"driver and CUDA 11.2's libraries (cuDNN 8, cuSOLVER, NVRTC, ...) on the library path "
               f"(LD_LIBRARY_PATH; docs/faq.md); without a GPU, install the CPU build: pip uninstall -y mxnet-cu112, "
               f"then {MXNET_PIP}"
               if isinstance(e, OSError) else
               f"MXNet 1.9.1 needs numpy < 1.24: {MXNET_PIP} (on GPUs mxnet-cu112 instead of mxnet)")
        return builds or f"MXNet cannot be imported ({type(e).__name__}: {first_line(e)}); {why}"
    return missing_package(e)


def threads_variable(value: Optional[str] = None) -> None:
    """ConfigError when OMP_NUM_THREADS (or `value`, its value for another process) is not what MXNet takes as its
    module is imported, a C int ("" and -1: as if unset): it ends the process with a C++ exception (exit 134)."""
    value = os.environ.get("OMP_NUM_THREADS") if value is None else value
    number = re.fullmatch(r"[ \t\n\r\f\v]*([+-]?[0-9]+)[ \t\n\r\f\v]*", value or "")
    if value and not (number and -2 ** 31 <= int(number[1]) < 2 ** 31):
        raise ConfigError(f"OMP_NUM_THREADS={value!r}: MXNet reads it as a whole number of threads per operator; "
                          "set it to one (e.g. OMP_NUM_THREADS=2, or cores / devices) or unset it")


def role_variable() -> None:
    """ConfigError when DMLC_ROLE is set to anything but "worker" (even ""), as the import of MXNet would start this
    process as a job's scheduler or server (`nmt.dmlc_role_problem`, which nmt's guard of that import raises too): a
    command says it before it does anything."""
    from nmt import dmlc_role_problem
    if problem := dmlc_role_problem():
        raise ConfigError(problem)


def run_cli(main: Callable[[], int]) -> int:
    """Run `main`, turning the project's bad-input errors into `error: ...` on stderr and exit code 2, and SIGTERM and
    SIGHUP into Ctrl-C's interruption with their own exit codes, from the start (imports, loading a model)."""
    from nmt.signals import terminated_as_interrupt   # (it imports this module: not at the top)
    standard_streams()
    # numpy 1.24's warning as MXNet 1.9.1 reads np.bool, just before the AttributeError said in one line below
    warnings.filterwarnings("ignore", r"In the future `np\.\w+` will be defined", FutureWarning, r"mxnet(\.|$)")
    try:
        with terminated_as_interrupt():
            return main()
    except KeyboardInterrupt as e:   # first: user_errors() imports mxnet, maybe the very import Ctrl-C cut short
        print("interrupted", file=sys.stderr)
        return e.exit_code if isinstance(e, Terminated) else 130
    except SystemExit:   # argparse's --help and usage errors (user_errors() would import mxnet, maybe broken)
        raise
    except (ImportError, AttributeError, OSError) as e:   # (an OSError: MXNet's library that cannot load, a CUDA
        # build without CUDA's; or a path with a name over 255 bytes, met before any check of the command's own)
        too_long = isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG
        said = import_failure(e) or (f"{e.filename}: longer than a file system takes (255 bytes a name in the path, "
                                     "4096 the path)" if too_long else "")
        if not said:
            raise
        print(f"error: {said}", file=sys.stderr)
        return 2
    except Exception as e:   # (a ConfigError first: user_errors() imports MXNet, which a bad OMP_NUM_THREADS aborts)
        if not (isinstance(e, ConfigError) or isinstance(e, user_errors())):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2


def with_version(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` with --version (nmt's version, as `nmt.__version__` gives it)."""
    from nmt import __version__
    parser.add_argument("--version", action="version", version=f"%(prog)s (nmt) {__version__}")
    return parser


class _Said(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


class EarlyWarnings(logging.StreamHandler):
    """The `nmt` logger's handler for its warnings before a command sets up its logging: each printed as
    "warning: ...", as the commands print their own (Python's last resort wrote the bare message), and kept, for
    `nmt.log.setup_logging` to write into the run's train.log. A distributed worker's are held instead (every worker
    would print them, unnamed: its rank is not known yet) for setup_logging to say once it names the rank."""

    def __init__(self):
        super().__init__()
        self.setLevel(logging.WARNING)
        self.setFormatter(_Said())
        self.hold = os.environ.get("DMLC_ROLE") == "worker"
        self.kept: List[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.kept.append(record)
        if not self.hold:
            super().emit(record)

    def hand_over(self, handlers: List[logging.Handler], console: Optional[logging.Handler]) -> None:
        """Give the warnings kept to a command's log `handlers`, but for its `console` one if they were printed."""
        for record in self.kept:
            for h in handlers:
                if self.hold or h is not console:
                    h.handle(record)
        self.kept = []

    def say_held(self) -> None:
        """Print the warnings held that no log took (the command ended before it set up its logging)."""
        for record in self.kept if self.hold else []:
            super().emit(record)
        self.kept = []


def early_warnings() -> EarlyWarnings:
    """An `EarlyWarnings` handler on the `nmt` logger (`setup_logging` replaces it)."""
    handler = EarlyWarnings()
    logging.getLogger("nmt").addHandler(handler)
    return handler


exit_code: Optional[int] = None   # what the last console command returned (a worker's exit keeps it: nmt.workers)


def command(build_parser: Callable[[], argparse.ArgumentParser]):
    """A console entry point `name(argv=None) -> exit code` from `body(args)`: parse `argv` (default: sys.argv)
    with `build_parser()`, then run `body` under `run_cli`."""
    def wrap(body: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
        def entry(argv: Optional[List[str]] = None) -> int:
            def run() -> int:
                args = with_version(build_parser()).parse_args(argv)
                threads_variable()   # (after --help and --version, which load no MXNet)
                role_variable()
                return body(args)
            global exit_code
            early = early_warnings()
            try:
                exit_code = run_cli(run)
                return exit_code
            finally:
                early.say_held()
                logging.getLogger("nmt").removeHandler(early)
        entry.__name__, entry.__qualname__, entry.__doc__ = body.__name__, body.__qualname__, body.__doc__
        return entry
    return wrap
