"""Checksummed files: hashing, verification and atomic downloads (single files and members of tar archives).

A failed or mismatching download never leaves a file behind, nor a directory it created (a mistyped --cache-dir
leaves no tree); every error is a `CorpusError` naming the URL or file and, for network failures, how to work
offline.
"""
from __future__ import annotations

import contextlib
import hashlib
import lzma
import http.client
import os
import socket
import tarfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import IO, Any, Dict, Iterable, Iterator, Sequence, Tuple

from nmt.atomic import atomic_open, atomic_write_bytes, scratch_dir
from nmt.commands import shell_word
from nmt.corpus import CorpusError
from nmt.storage import guarded_write

DOWNLOAD_TIMEOUT = 60.0   # seconds without progress before a download is abandoned
_CHUNK = 1 << 16
_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, socket.timeout, ConnectionError, TimeoutError)
MIRROR_HINT = ("use an offline mirror: pass --data-dir DIR or set NMT_DATA_DIR=DIR, a directory laid out like "
               "shared/data")


def mirror_lacks(data_dir: Path, rel: str) -> str:
    """" (the mirror DIR has no REL)", naming a directory one level above or below `data_dir` that has `rel` (a
    --data-dir given one level off: the mirror's parent, or one of its corpora)."""
    with contextlib.suppress(OSError):
        near = [d for d in (data_dir.parent, *sorted(data_dir.iterdir())) if (d / rel).is_file()]
        if near:
            return f" (the mirror {data_dir} has no {rel}; {near[0]} has it: --data-dir {shell_word(near[0])})"
    return f" (the mirror {data_dir} has no {rel})"


_HASHES: Dict[Tuple[str, int, int], str] = {}   # (path, size, mtime) -> sha256: each file is hashed once per process


def sha256_file(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def verify_file(path: Path, sha256: str, what: str) -> None:
    """Raise `CorpusError` naming the file and both hashes unless `path` has the registered checksum."""
    actual = sha256_file(path)
    if actual != sha256:
        raise CorpusError(f"{path}: checksum mismatch for {what}: expected sha256 {sha256}, got {actual}. " + (
            _edited(path, sha256) or "The file was changed, truncated or is a different version; restore the "
            "original (or delete it from the cache so that it is downloaded again)."))


def _edited(path: Path, sha256: str) -> str:
    """What changed a file whose original had `sha256`, when it is the original but for CRLF line ends (a Windows
    copy or checkout: git's core.autocrlf) or a UTF-8 byte-order mark (an editor's), and how to undo it; else ""."""
    crlf, bom, undone = _undone_hash(path)
    if not crlf and not bom or undone != sha256:
        return ""
    said = " and ".join(["its line ends were made CRLF (a Windows copy or checkout: git's core.autocrlf)"] * crlf +
                        ["a UTF-8 byte-order mark was put at its start (an editor's)"] * bom)
    undo = "; ".join(["`sed -i 's/\\r$//' " + shell_word(path) + "`"] * crlf +
                     ["`sed -i '1s/^\\xEF\\xBB\\xBF//' " + shell_word(path) + "`"] * bom)
    return f"It is the original but {said}: undo it ({undo}), or restore the original."


def _undone_hash(path: Path) -> Tuple[bool, bool, str]:
    """(whether `path` holds CRLF line ends, whether it starts with a UTF-8 byte-order mark, the sha256 of the file
    without them). Read in blocks, as it is hashed: not whole (a big archive, truncated, is no text to undo)."""
    h, crlf, bom, cr = hashlib.sha256(), False, False, b""   # (a CR ending a block: its LF may start the next one)
    with open(path, "rb") as f:
        for i, block in enumerate(iter(lambda: f.read(1 << 20), b"")):
            if i == 0 and block.startswith(b"\xef\xbb\xbf"):
                bom, block = True, block[3:]
            block = cr + block
            cr = b"\r" if block.endswith(b"\r") else b""
            block = block[:len(block) - len(cr)]
            crlf = crlf or b"\r\n" in block
            h.update(block.replace(b"\r\n", b"\n"))
    h.update(cr)
    return crlf, bom, h.hexdigest()


def _stream(url: str, out: IO[bytes], timeout: float, desc: str) -> str:
    """Copy `url` into `out` with a progress bar; return the sha256 of what was received."""
    from tqdm import tqdm   # (not with the module: a command's --help needs only the standard library)
    h = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        total = resp.headers.get("Content-Length")
        total = int(total) if total and total.isdecimal() else None
        got = 0
        with tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=None, leave=False) as bar:
            while True:
                chunk = resp.read(_CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                h.update(chunk)
                got += len(chunk)
                bar.update(len(chunk))
    if total is not None and got != total:
        raise http.client.IncompleteRead(b"", total - got)
    return h.hexdigest()


def download(url: str, dest: Path, sha256: str, *, timeout: float = DOWNLOAD_TIMEOUT) -> Path:
    """Download `url` to `dest` atomically; a failed or mismatching download leaves nothing at `dest`."""
    try:
        with _new_dirs_removed_on_failure([dest.parent]), atomic_open(dest, "wb") as f:
            actual = _stream(url, f, timeout, dest.name)
            if actual != sha256:
                raise CorpusError(f"{url}: checksum mismatch: expected sha256 {sha256}, got {actual}; the upstream "
                                  f"file changed or the download was corrupted. Nothing was written to {dest}.")
    except _NETWORK_ERRORS as e:
        raise _network_error(url, e) from None
    return dest


@contextlib.contextmanager
def _new_dirs_removed_on_failure(dirs: Iterable[Path]) -> Iterator[None]:
    """Run a block that creates `dirs` (with their ancestors) to write into; when it fails, remove those of them that
    did not exist before, deepest first, each only if empty: pre-existing directories and files stay."""
    missing = set()
    for d in dirs:
        d = Path(d).absolute()
        while not os.path.lexists(d) and d != d.parent:
            missing.add(d)
            d = d.parent
    try:
        yield
    except BaseException:
        for d in sorted(missing, key=lambda p: len(p.parts), reverse=True):   # children before their parents
            with contextlib.suppress(OSError):   # not empty (another process's file), or never created
                d.rmdir()
        raise


def _network_error(url: str, e: Exception) -> CorpusError:
    """What a failed download says: the URL, why, and how to work without network."""
    return CorpusError(f"cannot download {url} ({_reason(e)}). Without network, {MIRROR_HINT}.")


def _reason(e: Exception) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    if isinstance(e, http.client.IncompleteRead):
        return f"connection closed with {e.expected} bytes missing"
    return str(e) or type(e).__name__


def download_archive(url: str, wanted: Sequence[Any], cache_dir: Path, *, timeout: float = DOWNLOAD_TIMEOUT) -> None:
    """Download a tar archive once and write the `wanted` members (file specs with `member`, `sha256` and `path`),
    each checksum-verified, into `cache_dir`. A failure removes the directories it created."""
    with _new_dirs_removed_on_failure([cache_dir, *((cache_dir / s.path).parent for s in wanted)]):
        _download_archive(url, wanted, cache_dir, timeout)


def _download_archive(url: str, wanted: Sequence[Any], cache_dir: Path, timeout: float) -> None:
    with guarded_write(cache_dir):   # a read-only or foreign cache: StorageError naming it
        cache_dir.mkdir(parents=True, exist_ok=True)
    with scratch_dir(cache_dir, ".download-") as tmp:   # removed even on failure; a killed download's, next time
        archive = Path(tmp) / "archive"
        try:
            with guarded_write(archive), open(archive, "wb") as f:
                _stream(url, f, timeout, Path(url).name)
        except _NETWORK_ERRORS as e:
            raise _network_error(url, e) from None
        try:
            with tarfile.open(archive) as tar:
                members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
                for spec in wanted:
                    if spec.member not in members:
                        raise CorpusError(f"{url}: the archive has no member {spec.member!r} "
                                          f"(it has: {', '.join(sorted(members))})")
                    data = tar.extractfile(members[spec.member]).read()
                    actual = hashlib.sha256(data).hexdigest()
                    if actual != spec.sha256:
                        raise CorpusError(f"{url}: member {spec.member}: checksum mismatch: expected sha256 "
                                          f"{spec.sha256}, got {actual}; nothing was written to the cache.")
                    atomic_write_bytes(cache_dir / spec.path, data)
        except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as e:   # (damaged compressed data)
            raise CorpusError(f"{url}: not a readable tar archive ({e})") from None
