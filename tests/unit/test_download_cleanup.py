"""A failed download removes the directories it created (a mistyped --cache-dir leaves no tree behind), and only
those: directories that existed before stay, as do directories another file was written into."""
import hashlib
import socket
import urllib.error
from pathlib import Path

import pytest

from nmt import download as dl
from nmt.config import DataConfig
from nmt.corpus import CorpusError
from nmt.recipes import RECIPES, SOURCES, FileSpec, load_tests


def closed_port_url(name: str = "kor.txt") -> str:
    """A URL nothing answers: the connection is refused at once, as offline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/{name}"


def test_failed_download_removes_the_directories_it_created(tmp_path):
    with pytest.raises(CorpusError, match="cannot download"):
        dl.download(closed_port_url(), tmp_path / "a" / "b" / "c" / "kor.txt", "0" * 64, timeout=5)
    assert not (tmp_path / "a").exists() and list(tmp_path.iterdir()) == []


def test_failed_download_keeps_directories_that_existed(tmp_path):
    kept = tmp_path / "cache"
    kept.mkdir()
    with pytest.raises(CorpusError, match="cannot download"):
        dl.download(closed_port_url(), kept / "new" / "deeper" / "kor.txt", "0" * 64, timeout=5)
    assert kept.is_dir() and list(kept.iterdir()) == []   # the empty pre-existing directory stays; new/ is gone
    with pytest.raises(CorpusError, match="cannot download"):
        dl.download(closed_port_url(), kept / "kor.txt", "0" * 64, timeout=5)
    assert kept.is_dir()


def test_checksum_mismatch_removes_the_directories_too(tmp_path, monkeypatch):
    def stream(url, out, timeout, desc):
        out.write(b"other bytes")
        return hashlib.sha256(b"other bytes").hexdigest()
    monkeypatch.setattr(dl, "_stream", stream)
    with pytest.raises(CorpusError, match="checksum mismatch"):
        dl.download("https://example.invalid/kor.txt", tmp_path / "a" / "b" / "kor.txt", "0" * 64)
    assert not (tmp_path / "a").exists()


def test_a_directory_that_got_another_file_stays(tmp_path, monkeypatch):
    """Not empty (a file of another download, written meanwhile): not removed, nor are its parents."""
    def stream(url, out, timeout, desc):
        (tmp_path / "a" / "b" / "other.txt").write_bytes(b"x")
        raise urllib.error.URLError("offline")
    monkeypatch.setattr(dl, "_stream", stream)
    with pytest.raises(CorpusError, match="offline"):
        dl.download("https://example.invalid/kor.txt", tmp_path / "a" / "b" / "c" / "kor.txt", "0" * 64)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["a", "a/b", "a/b/other.txt"]


def test_failed_archive_download_removes_the_directories_it_created(tmp_path):
    wanted = [FileSpec(path=f"corpus/sub/x.{k}", sha256="0" * 64, bytes=1, archive_url=closed_port_url("x.tar.gz"),
                       member=f"x.{k}") for k in ("ko", "en")]
    with pytest.raises(CorpusError, match="cannot download"):
        dl.download_archive(wanted[0].archive_url, wanted, tmp_path / "a" / "b" / "cache", timeout=5)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage, says", [(lambda b: b[:-100], "Compressed file ended"),   # (EOFError)
                                           (lambda b: b[:4000] + bytes([b[4000] ^ 0xFF]) + b[4001:],
                                            "Error -3 while decompressing data")])   # (zlib.error)
def test_a_damaged_archive_is_named(tmp_path, damage, says):
    """A truncated .tar.gz (EOFError) or bad deflate data inside one (zlib.error): no TarError, a traceback."""
    import io
    import random
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = "".join(f"line {i} of the corpus {random.Random(i).random()}\n" for i in range(3000)).encode()
        info = tarfile.TarInfo("x.ko")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    archive = tmp_path / "x.tar.gz"
    archive.write_bytes(damage(buf.getvalue()))
    wanted = [FileSpec(path="corpus/x.ko", sha256="0" * 64, bytes=1, archive_url=archive.as_uri(), member="x.ko")]
    with pytest.raises(CorpusError, match=rf"x.tar.gz: not a readable tar archive \({says}"):
        dl.download_archive(wanted[0].archive_url, wanted, tmp_path / "cache", timeout=5)


def test_offline_recipe_with_a_mistyped_cache_dir_leaves_no_tree(tmp_path, monkeypatch):
    """`nmt-train --cache-dir /nonexistent/x/y --dry-run` offline left x/y/tatoeba-challenge-test-eng-kor/ behind."""
    monkeypatch.delenv("NMT_DATA_DIR", raising=False)   # no mirror: the test set would be downloaded
    for spec in SOURCES[RECIPES["tatoeba"].tests["tatoeba-test"]].files.values():
        monkeypatch.setattr(spec, "url", closed_port_url(Path(spec.path).name))
    cache = tmp_path / "x" / "y"
    with pytest.raises(CorpusError, match="tatoeba-challenge-test .*cannot download"):
        load_tests(DataConfig(recipe="tatoeba", cache_dir=str(cache)))
    assert list(tmp_path.iterdir()) == []


def test_a_killed_downloads_directory_goes_at_the_next_download_and_a_live_one_stays(tmp_path):
    """An archive is downloaded into a temporary directory of the cache, removed when done: a download killed
    (kill -9) left it, the archive in it, for good."""
    import os
    from nmt.atomic import hold
    cache = tmp_path / "cache"
    killed, live = cache / ".download-killed.tmp", cache / ".download-live.tmp"
    for d in (killed, live):
        d.mkdir(parents=True)
        (d / "archive").write_bytes(b"x" * 1000)
    fd = os.open(live, os.O_RDONLY)
    try:
        hold(fd)   # (as a download running in another process holds its directory)
        wanted = [FileSpec(path="corpus/x.ko", sha256="0" * 64, bytes=1, archive_url=closed_port_url("x.tar.gz"),
                           member="x.ko")]
        with pytest.raises(CorpusError, match="cannot download"):
            dl.download_archive(wanted[0].archive_url, wanted, cache, timeout=5)
        assert not killed.exists() and (live / "archive").exists()
    finally:
        os.close(fd)
