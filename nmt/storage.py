"""Writing to disk when the disk says no: full, read-only or not ours.

Every file the project writes goes through `guarded_write` (atomic saves, checkpoints, metrics rows, tokenizers,
downloads), so that ENOSPC, EDQUOT, EACCES, EPERM, EROFS (and a directory gone) end in one `StorageError` that
names the file, the error and, for a full disk, the space needed and free, instead of a traceback from deep inside
MXNet or SentencePiece. `check_room` is the pre-flight check of a model directory before training starts.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import re
import resource
import shutil
import sys
from pathlib import Path
from typing import Iterator, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]

# The write errors a user can fix (free space, fix permissions, pick another directory), with what to do.
_FIXABLE = {
    errno.ENOSPC: "free some space or choose a directory on another disk",
    errno.EDQUOT: "free some space within your quota or choose another directory",
    errno.EACCES: "check the permissions of the directory or choose another one",
    errno.EPERM: "check the permissions of the directory or choose another one",
    errno.EROFS: "the file system is mounted read-only; choose a writable directory",
    errno.ENOTDIR: "a part of the path is a file, not a directory; choose another path",
    errno.EISDIR: "give the path of a file, not of a directory",
    errno.ENOENT: "a directory on its path is gone (moved or deleted while in use?): put it back or choose another "
                  "path",
    errno.EFBIG: "the file would pass a size limit: the shell's (`ulimit -f`, a batch job's) or the file system's "
                 "(FAT32 holds 4 GiB at most); raise the limit or choose another disk",
}
_FULL = (errno.ENOSPC, errno.EDQUOT)


class StorageError(RuntimeError):
    """A file could not be written (full disk, no permission, read-only file system); the message names the file
    and says what to do. Not an OSError on purpose: no `except OSError` meant for other failures swallows it.
    `errno`: the error of the write (`write_failure`'s), for `scratch_room`; else None."""
    errno: Optional[int] = None


def human_bytes(n: Optional[float]) -> str:
    """1536 -> '1.5 KiB': sizes in messages people read."""
    if n is None:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n:.1f} TiB"


def existing_ancestor(path: PathLike) -> Path:
    """`path` or its nearest ancestor that exists: where a file about to be created would land."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: PathLike) -> int:
    """Bytes free for an unprivileged user on the file system that holds (or would hold) `path`."""
    return shutil.disk_usage(existing_ancestor(path)).free


def write_failure(path: PathLike, err: OSError, needed: Optional[int] = None, action: str = "write") -> StorageError:
    """The StorageError of a failed write of `path`: the file, the error, space needed and free, what to do.
    `action`: what could not be done to `path` ("create a file in" a directory)."""
    msg = f"cannot {action} {path}: {os.strerror(err.errno)} [errno {errno.errorcode.get(err.errno, err.errno)}]"
    if err.errno in _FULL and _device(path):   # (/dev/full: its file system's free space is beside the point)
        return StorageError(f"{msg}: {path} is a device, not a file on a disk; give a file as the output")
    if err.errno in _FULL:
        msg += f"; {human_bytes(free_bytes(path))} free"
        msg += f", about {human_bytes(needed)} needed" if needed else ""
    failure = StorageError(f"{msg}; {_advice(path, err.errno)}")
    failure.errno = err.errno
    return failure


def _advice(path: PathLike, code: int) -> str:
    """What to do about the write error `code` of `path`: a permission refused on a file that exists is maybe its
    own (a lock file opened in place, made read-only by `chmod -R a-w`), not only its directory's."""
    if code in (errno.EACCES, errno.EPERM) and os.path.isfile(path):
        theirs = others_file(path)
        return (f"{theirs}, or choose another directory" if theirs else
                "check the permissions of the file (chmod u+w) and of its directory, or choose another directory")
    return _FIXABLE[code]


def others_file(path: PathLike) -> str:
    """"" when `path` is this user's (or gone), else whose it is and who can make it writable: a file another user
    made in a shared directory (a lock opened in place, 644 by their umask), which this user cannot chmod."""
    try:
        owner = os.stat(path).st_uid
    except OSError:
        return ""
    if owner == os.geteuid():
        return ""
    try:
        import pwd
        name = pwd.getpwuid(owner).pw_name
    except (ImportError, KeyError):
        name = f"uid {owner}"
    return (f"the file is another user's, {name}'s: they can make it writable for you (chmod g+w for a group you "
            "share, or a+w)")


def _device(path: PathLike) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode) or stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def is_fixable(err: BaseException) -> bool:
    if isinstance(err, OSError) and err.errno == errno.ENOENT:   # its directory gone, not a file system making none
        return bool(err.filename) and _gone(err.filename)
    return isinstance(err, OSError) and err.errno in _FIXABLE


def _gone(path: PathLike) -> bool:
    """Whether the directory `path` was to be written in does not exist (any more)."""
    try:
        return not os.path.isdir(os.path.dirname(os.path.abspath(path)))
    except FileNotFoundError:   # the current directory itself (a relative path's) is gone
        return True


@contextlib.contextmanager
def guarded_write(path: PathLike, needed: Optional[int] = None) -> Iterator[None]:
    """Turn a full disk, a permission or a read-only error raised while writing `path` into a StorageError (in a
    temporary directory: within `scratch_room`). Other errors pass through unchanged."""
    try:
        yield
    except OSError as e:
        if is_fixable(e):
            raise write_failure(path, e, needed) from None
        raise


@contextlib.contextmanager
def scratch_room(directory: Optional[PathLike], what: str) -> Iterator[None]:
    """Around writes into `directory`, a temporary directory in $TMPDIR (the tokenizer's training text, a dry run's
    model directory; None: not one), a full disk's StorageError said as `scratch_full` says it (what no room was left
    for: `what`), not with the advice of a flag's directory ("choose a directory on another disk"), which no flag
    chooses. Other errors pass through."""
    try:
        yield
    except StorageError as e:
        if directory is None or e.errno not in _FULL:
            raise
        raise StorageError(scratch_full(directory, what)) from None


def short_write_failure(path: PathLike, err: Exception, needed: Optional[int]) -> Optional[StorageError]:
    """MXNet reports a short write as `MXNetError: ... Write incomplete` with no errno, numpy's `tofile` (np.save into
    a file) as `OSError: N requested and M written` with none either. When the disk is (nearly) full, that is what
    happened: the StorageError to raise instead; so is an error whose text carries one of the fixable errors'
    messages (MXNet failing to open a file on a read-only file system); else None."""
    for code in _FIXABLE:
        if os.strerror(code) in str(err) and (code != errno.ENOENT or _gone(path)):
            return write_failure(path, OSError(code, os.strerror(code)), needed)
    free = free_bytes(path)
    if "Write" not in str(err) and " written" not in str(err) and free > (needed or 0):
        return None
    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY and free > (needed or 0):
        return write_failure(path, OSError(errno.EFBIG, os.strerror(errno.EFBIG)), needed)   # (`ulimit -f`: no errno)
    return StorageError(f"cannot write {path}: the write was cut short ({error_line(err)[:200]}); "
                        f"{human_bytes(free)} free"
                        f"{', about ' + human_bytes(needed) + ' needed' if needed else ''}; {_FIXABLE[errno.ENOSPC]}")


def written_whole(tmp: PathLike, path: PathLike, needed: Optional[int]) -> None:
    """StorageError unless the MXNet parameter file `tmp`, written for `path`, loads whole: MXNet's file stream may
    not report a write that a full disk cut short, and the file would be renamed into place and its manifest made."""
    import mxnet as mx   # not at import time: the command line's checks run without MXNet
    try:
        mx.nd.load(str(tmp))
    except mx.base.MXNetError as e:
        about = f", about {human_bytes(needed)} needed" if needed else ""
        raise StorageError(f"cannot write {path}: the file written is incomplete ({error_line(e)[:200]}); "
                           f"{human_bytes(free_bytes(path))} free{about}; {_FIXABLE[errno.ENOSPC]}") from None


def check_writable(directory: PathLike, flag: str = "--model-dir", shown: Optional[PathLike] = None) -> None:
    """StorageError unless a file can be created in `directory` (or, if it does not exist yet, where it would be
    created): found before training, not at the first checkpoint an hour later. The error names `flag` with its
    value, `shown` (e.g. a file of `directory`) or `directory`."""
    where = existing_ancestor(directory)
    directory = shown or directory
    if not where.is_dir():
        raise StorageError(f"{flag} {directory}: {where} is a file, not a directory; choose another {flag}")
    probe = where / f".nmt-write-probe-{os.getpid()}"   # (named in no message: the user gave `directory`)
    try:
        probe.write_bytes(b"")
    except OSError as e:
        if is_fixable(e):
            raise StorageError(f"{flag} {directory}: {write_failure(where, e, action='create a file in')}") from None
        # not a fixable write error, yet no file can be made there (e.g. a path under /proc)
        raise StorageError(f"{flag} {directory}: cannot create a file in {where} ({e.strerror}); choose another "
                           f"{flag}") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def unwritable_file(path: PathLike) -> str:
    """Why the file `path` could not be opened for writing in place once its missing directories are made, found
    without making or emptying anything; "" when nothing is found (a directory, or a missing file's directories, are
    `nmt.cli_io.output_dir`'s to say): an existing file that may not be written (no permission, a read-only file
    system: opened for writing here, not truncated), a name ending in "/" (a directory's), or a symbolic link to no
    file, whose file opening cannot make (its directory missing or not writable: opening makes no directory)."""
    name = os.fspath(path)
    if os.path.isdir(name):
        return ""
    if name.endswith("/"):
        return "a name ending in / is a directory's; give the file to write"
    if os.path.isfile(name):
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_NOCTTY))
        except OSError as e:
            return f"cannot write it ({e.strerror.lower()})"
        return ""
    if not os.path.islink(name) or os.path.exists(name):
        return ""
    target = Path(os.path.realpath(name))
    why = ("a loop of links" if target.is_symlink() else f"no directory {target.parent}" if not target.parent.is_dir()
           else "" if os.access(target.parent, os.W_OK | os.X_OK) else f"{target.parent} is not writable")
    return why and f"a symbolic link to {os.readlink(name)}, whose file cannot be made ({why})"


def mxnet_name(path: PathLike, flag: str = "") -> str:
    """`path` as MXNet's file functions take it, which encode a name as UTF-8; a StorageError naming it (after
    `flag`) when the file system's bytes for it are not that (a directory name in CP949 from a Windows archive, or a
    non-ASCII name under a locale that is not UTF-8): MXNet would open another name."""
    name = os.fspath(path)
    with contextlib.suppress(UnicodeEncodeError):
        if name.encode("utf-8") == os.fsencode(name):
            return name
    encoding = sys.getfilesystemencoding()
    why = (f"the locale's encoding is {encoding}: run in a UTF-8 locale (LC_ALL=C.UTF-8)" if encoding != "utf-8"
           else "another system's encoding, such as CP949: rename it, e.g. `convmv -f cp949 -t utf-8 --notest NAME`")
    shown = os.fsencode(name).decode("ascii", "backslashreplace")   # (its bytes, \xNN: whatever the terminal reads)
    raise StorageError(f"{flag + ' ' if flag else ''}{shown}: MXNet opens files by UTF-8 names, and the bytes of this "
                       f"one are not UTF-8 ({why})")


def check_room(directory: PathLike, needed: int, what: str, flag: str = "--model-dir", keep_last: bool = True) -> None:
    """StorageError when the file system of `directory` has less than `needed` bytes free for `what` (`keep_last`:
    a figure --keep-last lowers)."""
    free = free_bytes(directory)
    if free < needed:
        raise StorageError(f"{flag} {directory}: {human_bytes(free)} free, but {what} need about "
                           f"{human_bytes(needed)}; free some space{', lower --keep-last' if keep_last else ''} or "
                           f"choose another {flag}")


def check_scratch_room(directory: PathLike, needed: int, what: str) -> None:
    """StorageError when the temporary directory `directory` (`nmt.atomic.scratch_dir` in $TMPDIR: a dry run's) has
    less than `needed` bytes free for `what`. No flag chooses it: the error names TMPDIR, and the room to give it for
    `what` and the files `directory` holds already."""
    if free_bytes(directory) < needed:
        raise StorageError(scratch_full(directory, what, needed))


def scratch_full(directory: PathLike, what: str, needed: Optional[int] = None) -> str:
    """The sentence for the temporary directory `directory` (made in $TMPDIR) too full for `what`: it, its free space
    and what to do (no flag chooses it: TMPDIR), with `needed` bytes the room to give it besides the files it holds.
    One wording for every such error: the room check's, SentencePiece's write error and a model it wrote short."""
    room = f"about {human_bytes(needed + allocated(directory))} free" if needed else "more room"
    return (f"the temporary directory {directory}: {human_bytes(free_bytes(directory))} free, too little for {what}"
            f"{f' (about {human_bytes(needed)} needed)' if needed else ''}; free some space there or set TMPDIR to a "
            f"directory with {room}")


def allocated(directory: PathLike) -> int:
    """Bytes the files in `directory` (not in its subdirectories) take on its disk, in whole blocks as allocated."""
    return sum(f.stat().st_blocks * 512 for f in Path(directory).iterdir() if f.is_file())


# Lines of the C++ stack MXNet's error messages carry around their own ("Traceback ...", "File ...", "[bt] ...").
_STACK_LINE = re.compile(r"Traceback \(most recent call last\)|File \"|\[bt\]|Stack trace|\d+: ")


def error_line(e: BaseException) -> str:
    """What an error says, in one line: MXNet's "Check failed: ..." line or else its first line that is not of a
    stack trace, without the "MXNetError: " before it; the exception's class when it says nothing."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip() and not _STACK_LINE.match(line.strip())]
    line = next((line for line in lines if "Check failed" in line), lines[0] if lines else type(e).__name__)
    return line[len("MXNetError: "):] if line.startswith("MXNetError: ") else line
