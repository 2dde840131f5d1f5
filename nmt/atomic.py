"""Atomic file writes: temporary file in the same directory, fsync, rename.

A crash at any instant leaves either the old file or the new one, never a torn file. Used for every file
the project writes that someone may read back (checkpoints, configs, downloads, metrics snapshots).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Iterator, Optional, Union

from nmt.storage import StorageError, is_fixable, short_write_failure, write_failure

PathLike = Union[str, "os.PathLike[str]"]
# Seconds within which an empty temporary file may be a live process's that has not locked it yet (`hold`): the
# instant between creating it and its flock, with room for clocks that differ on a shared file system.
JUST_MADE = 60.0


def _create_sibling(path: Path) -> tuple:
    """(fd, name) of a new, exclusively created temporary file beside `path`, made like `open` makes files (mode
    0666 less the umask, applied by the kernel), not private like mkstemp's 0600: a model directory must be as
    readable as any other file its user writes. A file that replaces one takes that one's permissions, as `sed -i`
    keeps them (a scores.json made private stays private). A name too long for a sibling's prefix and suffix is
    shortened in the temporary file's name (the limit is 255 bytes)."""
    while True:
        tmp = str(path.parent / f".{sibling_stem(path)}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        keep_mode(path, fd)
        return fd, tmp


def sibling_stem(path: Path) -> str:
    """`path`'s name as the names of the files made beside it start (".<stem>.xxx"): a name over 200 bytes hashed,
    so that the sibling's stays within the 255 a file system takes."""
    name = os.fsencode(path.name)
    return path.name if len(name) <= 200 else hashlib.sha1(name).hexdigest()


def keep_mode(path: Path, new: Union[int, str, Path]) -> None:
    """Give `new` (a descriptor or the name of a file about to replace `path`) the permissions of `path`, if it
    exists."""
    with contextlib.suppress(OSError):   # (no such file; a file system without modes)
        os.chmod(new, stat.S_IMODE(os.stat(path).st_mode))


def hold(fd: int) -> None:
    """Lock the temporary file (or directory) open as `fd`, before anything is written in it, until it is closed: so
    that `abandoned` tells it from one a killed process left (the kernel drops the lock however its holder ends, kill
    -9 too, as train.lock's)."""
    with contextlib.suppress(OSError):   # a file system without locks: `abandoned` then keeps every file
        fcntl.flock(fd, fcntl.LOCK_EX)


def abandoned(path: PathLike) -> bool:
    """Whether the temporary file or directory `path`, whose maker `hold`s it while in use, was left by a process that
    died: it is the current user's (root's too: another user's entries in a shared /tmp are theirs to remove), no
    process holds it, and it holds something (written only once held) or is older than JUST_MADE (an empty one may be
    a live maker's the instant before it locks it). False on a file system without locks, for a path gone meanwhile,
    and for what no maker leaves: a symbolic link, a named pipe."""
    try:   # (not blocking: opening a named pipe waits for a writer, and anyone may make one of such a name in /tmp)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        filled = bool(os.listdir(path)) if stat.S_ISDIR(st.st_mode) else st.st_size > 0
        return filled or time.time() - st.st_mtime > JUST_MADE
    except OSError:   # held (BlockingIOError), or no locks here
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def scratch_dir(directory: PathLike, prefix: str) -> Iterator[Path]:
    """A new directory `<directory>/<prefix>XXXXXXXX.tmp` for the files made on the way (SentencePiece's training
    text), removed with them when done and held meanwhile (`hold`): the next one made there with `prefix` first removes
    those that processes of the same user killed while using them left (kill -9, out of memory: no exit handler ran),
    and no live one's (`abandoned`). A StorageError names `directory` when no directory can be made in it."""
    directory = Path(directory)
    for left in directory.glob(f"{glob.escape(prefix)}*.tmp"):
        if abandoned(left):
            shutil.rmtree(left, ignore_errors=True)
    try:
        tmp = tempfile.TemporaryDirectory(prefix=prefix, suffix=".tmp", dir=str(directory))
    except OSError as e:   # a full or read-only /tmp: named
        raise _cannot_write(directory, e, f"make a directory in {directory}") from None
    fd = os.open(tmp.name, os.O_RDONLY)
    try:
        hold(fd)
        with tmp:   # (removed while held: no sweep takes it for a killed process's meanwhile)
            yield Path(tmp.name)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (best effort: some file systems refuse fsync on directories)."""
    try:
        fd = os.open(str(directory), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _create_beside(path: Path) -> tuple:
    """`_create_sibling(path)`, its directory made first; a StorageError naming `path` (not the temporary file) when
    no file can be created beside it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:   # a file where a directory of the path should be
        raise write_failure(path, NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))) from None
    except OSError as e:
        raise _cannot_write(path, e, f"make its directory {path.parent}") from None
    try:
        return _create_sibling(path)
    except OSError as e:   # e.g. a directory of a virtual file system such as /proc
        raise _cannot_write(path, e, f"create a file in {path.parent}") from None


def _cannot_write(path: Path, e: OSError, what: str) -> StorageError:
    """The error of an `e` that keeps a file from being written at `path` while trying to do `what`."""
    return write_failure(path, e) if is_fixable(e) else StorageError(
        f"cannot write {path}: cannot {what} ({e.strerror}); choose another directory")


_DESCRIPTOR = re.compile(r"/dev/(?:(stdin)|(stdout)|(stderr)|fd/(\d+))|/proc/self/fd/(\d+)")


def descriptor(path: PathLike) -> Optional[int]:
    """The open file descriptor that `path` names (/dev/stdout, /dev/fd/3, /proc/self/fd/1), or None."""
    m = _DESCRIPTOR.fullmatch(os.path.normpath(str(path)))
    return None if m is None else next(i if i < 3 else int(g) for i, g in enumerate(m.groups()) if g)


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "wb", encoding: str = None, size: Optional[int] = None) -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; on success it replaces `path` atomically. A symbolic link
    stays: the file it points to is replaced. A path that exists and is neither a regular file nor a directory (a
    device such as /dev/stdout, a named pipe) is not replaced but written to as it is. A `path` that is a directory,
    or where no file can be created, is a StorageError naming it; `size`, the bytes to be written if known, is the
    room a full disk's error asks for. A name of an open descriptor (/dev/stdout) is written through that
    descriptor: re-opened, or replaced through the link it is, the file it goes to would lose what it holds."""
    path = Path(path)
    fd = descriptor(path)
    if fd is not None or path.exists() and not path.is_file() and not path.is_dir():   # (a pipe of a shell ...)
        try:   # an open descriptor's name: written through it (a `>> file` it goes to kept, not replaced)
            for stream in (sys.stdout, sys.stderr):   # (what was printed before comes first)
                stream.flush()
            with (os.fdopen(os.dup(fd), mode, encoding=encoding if "b" not in mode else None) if fd is not None else
                  open(path, mode, encoding=encoding if "b" not in mode else None)) as f:
                yield f
        except OSError as e:
            if is_fixable(e):   # /dev/full, no permission: one clear error naming the file
                raise write_failure(path, e) from None
            raise
        return
    if path.is_dir():   # (through links) else found only by the final rename, which names the temporary file
        raise write_failure(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    path = Path(os.path.realpath(path)) if path.is_symlink() else path
    fd, tmp = _create_beside(path)
    try:
        with os.fdopen(fd, mode, encoding=encoding if "b" not in mode else None) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_fixable(e):   # full disk, no permission, read-only: one clear error naming the file (and the room
            raise write_failure(path, e, size) from None   # it needs, not the bytes written before the disk filled)
        if isinstance(e, OSError) and e.errno is None:   # numpy's short write ("N requested and M written")
            raise (short_write_failure(path, e, size) or e) from None
        raise


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    with atomic_open(path, "wb", size=len(data)) as f:
        f.write(data)


def atomic_write_text(path: PathLike, text: str) -> None:
    with atomic_open(path, "w", encoding="utf-8", size=len(text.encode("utf-8"))) as f:
        f.write(text)


def atomic_copy(src: PathLike, dst: PathLike) -> None:
    """Copy a file atomically (used to publish a finished temporary file, e.g. a SentencePiece model)."""
    with open(src, "rb") as fin, atomic_open(dst, "wb", size=os.path.getsize(src)) as fout:
        while True:
            chunk = fin.read(1 << 20)
            if not chunk:
                break
            fout.write(chunk)
