"""Dataset recipes: registry, checksummed mirror/cache/download (against a local HTTP server), load_data."""
import dataclasses
import hashlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nmt import recipes
from nmt.commands import shell_word
from nmt.config import Config, ConfigError, DataConfig
from nmt.corpus import CorpusError, Pairs
from nmt.recipes import (RECIPES, SOURCES, FileSpec, Recipe, Source, clean_rest_docs, default_cache_dir, download,
                         fetch, load_data, parse_upsample, resolve_data_dir)

REPO = Path(__file__).resolve().parents[2]
RAW_URL = re.compile(r"^https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/[0-9a-f]{40}/\S+$")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_in(directory: Path):
    """Files (not directories) below `directory`, temporary ones included."""
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())


# --- a local HTTP server ---------------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.hits.append(self.path)
        body = self.server.routes.get(self.path)
        if self.path == "/truncated":     # announces more bytes than it sends, then hangs up
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"partial data")
            self.close_connection = True
            return
        if self.path == "/slow":
            time.sleep(5)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):   # keep test output quiet
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.routes, srv.hits = {"/slow": b"late"}, []
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/kor.txt"


# --- the registry ------------------------------------------------------------------------------------------

def test_registry_is_complete():
    for name, src in SOURCES.items():
        assert src.license and src.citation and src.title and src.homepage, name
        assert set(src.files) == ({"tsv"} if src.format == "tsv" else {"ko", "en"}), name
        for spec in src.files.values():
            assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256) and spec.bytes > 0
            assert sum(x is not None for x in (spec.url, spec.archive_url, spec.derived)) == 1, spec.path
            for url in (spec.url, spec.archive_url):
                assert url is None or RAW_URL.match(url), url
            assert spec.archive_url is None or spec.member
    for name, rec in RECIPES.items():
        assert set(rec.train) <= set(SOURCES) and set(rec.tests.values()) <= set(SOURCES), name
        assert not set(rec.train) & set(rec.tests.values())
    assert RECIPES["tatoeba"].train == ["tatoeba-manythings"] and RECIPES["tatoeba"].dev_size == 500
    assert RECIPES["tatoeba"].tests == {"tatoeba-test": "tatoeba-challenge-test"}
    assert set(RECIPES["all"].train) == {"tatoeba-manythings", "python-docs-ko", "jhe-dev", "news-dev"}
    assert set(RECIPES["all"].tests) == {"tatoeba-test", "flores200-devtest"}


# --- downloading -------------------------------------------------------------------------------------------

def test_download_writes_verified_file(server, tmp_path):
    body = "Go.\t가.\n".encode() * 5000
    server.routes["/kor.txt"] = body
    dest = tmp_path / "cache" / "sub" / "kor.txt"
    assert download(server.url + "/kor.txt", dest, sha(body)) == dest
    assert dest.read_bytes() == body and files_in(tmp_path / "cache") == ["sub/kor.txt"]


def test_download_checksum_mismatch_leaves_nothing(server, tmp_path):
    body = b"tampered\n"
    server.routes["/kor.txt"] = body
    expected = sha(b"original\n")
    with pytest.raises(CorpusError) as e:
        download(server.url + "/kor.txt", tmp_path / "cache" / "kor.txt", expected)
    msg = str(e.value)
    assert "checksum mismatch" in msg and expected in msg and sha(body) in msg and "/kor.txt" in msg
    assert files_in(tmp_path / "cache") == []


@pytest.mark.parametrize("path, reason", [("/truncated", "bytes missing"), ("/missing", "HTTP 404")])
def test_failed_download_leaves_no_partial_file(server, tmp_path, path, reason):
    with pytest.raises(CorpusError) as e:
        download(server.url + path, tmp_path / "cache" / "kor.txt", sha(b"x"))
    assert reason in str(e.value) and "--data-dir" in str(e.value) and "NMT_DATA_DIR" in str(e.value)
    assert files_in(tmp_path / "cache") == []


def test_download_timeout(server, tmp_path):
    t0 = time.time()
    with pytest.raises(CorpusError, match="cannot download"):
        download(server.url + "/slow", tmp_path / "slow", sha(b"late"), timeout=0.3)
    assert time.time() - t0 < 4 and files_in(tmp_path) == []   # gave up long before the 5 s the server waits


def test_no_network_and_no_mirror_names_the_options(tmp_path):
    body = b"x\ty\n"
    src = _source({"tsv": body}, url=closed_port_url())
    with pytest.raises(CorpusError) as e:
        fetch(src, "tsv", None, tmp_path / "cache", timeout=2)
    assert "--data-dir" in str(e.value) and "NMT_DATA_DIR" in str(e.value) and "127.0.0.1" in str(e.value)
    assert files_in(tmp_path / "cache") == []


# --- fetch: mirror, cache, network ------------------------------------------------------------------------------

def _source(contents, url=None, archive_url=None, derived=None, name="syn", fmt=None):
    """A registry source whose files have `contents` (written to nowhere; callers place them)."""
    files = {}
    for key, body in contents.items():
        files[key] = FileSpec(path=f"{name}/{name}.{key}", sha256=sha(body), bytes=len(body),
                              url=(url or f"http://invalid/{key}") if not (archive_url or derived) else None,
                              archive_url=archive_url, member=f"{name}.{key}" if archive_url else None,
                              derived=derived)
    fmt = fmt or ("tsv" if "tsv" in contents else "parallel")
    return Source(name=name, title=name, license="CC0", citation="none", homepage="none", format=fmt, files=files,
                  ko_col=1 if fmt == "tsv" else None, en_col=0 if fmt == "tsv" else None)


def test_fetch_prefers_mirror_and_verifies_it(tmp_path, write_file):
    src = _source({"ko": "가\n".encode(), "en": b"a\n"})
    mirror = tmp_path / "mirror"
    write_file("mirror/syn/syn.ko", "가\n")
    assert fetch(src, "ko", mirror, tmp_path / "cache") == mirror / "syn/syn.ko"
    bad = write_file("mirror/syn/syn.en", b"b\n")
    with pytest.raises(CorpusError) as e:
        fetch(src, "en", mirror, tmp_path / "cache")
    msg = str(e.value)
    assert str(bad) in msg and src.files["en"].sha256 in msg and sha(b"b\n") in msg and "checksum mismatch" in msg


def test_a_mirror_file_with_crlf_line_ends_or_a_byte_order_mark_is_told_so(tmp_path, write_file):
    """A mirror checked out or copied on Windows (git's core.autocrlf: CRLF line ends) or saved by an editor (a
    byte-order mark) was "changed, truncated or a different version": it is the original but for that, which a
    command undoes."""
    original = "가\tA\n나\tB\n".encode()
    src = _source({"tsv": original})
    path = tmp_path / "mirror/syn/syn.tsv"
    for changed, words in ((original.replace(b"\n", b"\r\n"), ["line ends were made CRLF", "core.autocrlf"]),
                           (b"\xef\xbb\xbf" + original, ["byte-order mark"]),
                           (b"\xef\xbb\xbf" + original.replace(b"\n", b"\r\n"), ["CRLF", "byte-order mark"])):
        write_file("mirror/syn/syn.tsv", changed)
        with pytest.raises(CorpusError) as e:
            fetch(src, "tsv", tmp_path / "mirror", tmp_path / "cache")
        assert "It is the original but" in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
        for command in re.findall(r"`(sed [^`]*)`", str(e.value)):
            subprocess.run(command, shell=True, check=True)
        assert path.read_bytes() == original
    write_file("mirror/syn/syn.tsv", original.replace(b"A", b"C").replace(b"\n", b"\r\n"))   # changed too: no
    with pytest.raises(CorpusError, match="changed, truncated or is a different version"):
        fetch(src, "tsv", tmp_path / "mirror", tmp_path / "cache")


def test_a_big_mirror_file_is_told_of_crlf_in_blocks_not_read_whole(tmp_path):
    """Telling a mismatching mirror file from its original but for CRLF line ends or a byte-order mark read the file
    whole and copied it (a 100 MB file took 200-300 MB, a truncated download of a big archive more than the memory);
    it is read in blocks, a CRLF split between two of them found all the same."""
    import tracemalloc
    from nmt.download import verify_file
    original = b"".join(b"%06d \xea\xb0\x80\tA%s\n" % (i, b"x" * (i % 7)) for i in range(900_000))   # ~16 MB
    path = tmp_path / "big.tsv"
    path.write_bytes(b"\xef\xbb\xbf" + original.replace(b"\n", b"\r\n"))
    tracemalloc.start()
    try:
        with pytest.raises(CorpusError, match="It is the original but its line ends were made CRLF .* and a UTF-8 "
                                              "byte-order mark"):
            verify_file(path, sha(original), "syn")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    path.write_bytes(original.replace(b"\n", b"\r\n") + b"\r")   # (a CR at the very end: another file)
    with pytest.raises(CorpusError, match="changed, truncated or is a different version"):
        verify_file(path, sha(original), "syn")
    split = b"a" * ((1 << 20) - 4) + b"\nb\n"   # (a CR ending the first MiB read, its LF starting the next)
    path.write_bytes(b"\xef\xbb\xbf" + split.replace(b"\n", b"\r\n"))
    with pytest.raises(CorpusError, match="It is the original but its line ends were made CRLF"):
        verify_file(path, sha(split), "syn")


def test_fetch_downloads_once_into_cache(server, tmp_path):
    body = "Hi.\t안녕.\n".encode()
    server.routes["/syn.tsv"] = body
    src = _source({"tsv": body}, url=server.url + "/syn.tsv")
    cache = tmp_path / "cache"
    path = fetch(src, "tsv", None, cache)
    assert path == cache / "syn/syn.tsv" and path.read_bytes() == body
    assert fetch(src, "tsv", tmp_path / "empty-mirror", cache) == path and server.hits == ["/syn.tsv"]
    path.write_bytes(b"changed\n")
    with pytest.raises(CorpusError, match="checksum mismatch.*delete it from the cache"):
        fetch(src, "tsv", None, cache)


def _tar_gz(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_fetch_extracts_verified_archive_members(server, tmp_path):
    ko, en = "기사.\n".encode(), b"Article.\n"
    server.routes["/dev.tar.gz"] = _tar_gz({"dev/syn.ko": ko, "dev/syn.en": en})
    src = _source({"ko": ko, "en": en}, archive_url=server.url + "/dev.tar.gz")
    cache = tmp_path / "cache"
    assert fetch(src, "ko", None, cache).read_bytes() == ko
    assert fetch(src, "en", None, cache).read_bytes() == en and len(server.hits) == 1   # one download for both
    assert files_in(cache) == ["syn/syn.en", "syn/syn.ko"]                     # archive not kept


def test_archive_member_mismatch_writes_nothing(server, tmp_path):
    server.routes["/dev.tar.gz"] = _tar_gz({"syn.ko": b"other\n", "syn.en": b"Article.\n"})
    src = _source({"ko": "기사.\n".encode(), "en": b"Article.\n"}, archive_url=server.url + "/dev.tar.gz")
    with pytest.raises(CorpusError, match="member syn.ko: checksum mismatch"):
        fetch(src, "ko", None, tmp_path / "cache")
    assert files_in(tmp_path / "cache") == []


def test_mirror_only_file_without_mirror(tmp_path):
    src = _source({"ko": b"x\n", "en": b"y\n"}, derived="extracted from .po files with polib")
    with pytest.raises(CorpusError) as e:
        fetch(src, "ko", tmp_path, tmp_path / "cache")
    msg = str(e.value)
    assert "mirror-only" in msg and "polib" in msg and "--data-dir" in msg and "NMT_DATA_DIR" in msg


@pytest.mark.parametrize("given, has_it", [("shared", "shared/data"), ("shared/data/syn", "shared/data")])
def test_a_mirror_given_one_level_off_is_named_where_it_is(tmp_path, given, has_it):
    """`--data-dir ../shared` (the mirror is ../shared/data) or a corpus folder of the mirror said only that the
    mirror has no such file."""
    src = _source({"ko": b"x\n", "en": b"y\n"}, derived="extracted from .po files with polib")
    (tmp_path / "shared/data/syn").mkdir(parents=True)
    (tmp_path / "shared/data/syn/syn.ko").write_bytes(b"x\n")
    with pytest.raises(CorpusError) as e:
        fetch(src, "ko", tmp_path / given, tmp_path / "cache")
    assert (f"(the mirror {tmp_path / given} has no syn/syn.ko; {tmp_path / has_it} has it: --data-dir "
            f"{shell_word(tmp_path / has_it)})") in str(e.value)
    with pytest.raises(CorpusError) as e:
        fetch(src, "en", tmp_path / given, tmp_path / "cache")   # (nowhere near)
    assert str(e.value).count("has it") == 0 and f"the mirror {tmp_path / given} has no syn/syn.en" in str(e.value)


def test_a_recipe_with_a_mirror_only_corpus_says_so_before_downloading(tmp_path, monkeypatch):
    """--recipe all without a mirror first downloaded (or, offline, failed to download) its other corpora, and only
    then said that python-docs-ko cannot be downloaded."""
    from nmt import recipes
    monkeypatch.delenv("NMT_DATA_DIR", raising=False)
    fetched = []
    monkeypatch.setattr(recipes, "download", lambda *a, **k: fetched.append(a))
    monkeypatch.setattr(recipes, "download_archive", lambda *a, **k: fetched.append(a))
    with pytest.raises(CorpusError, match="python-docs-ko.* is mirror-only"):
        load_data(DataConfig(recipe="all", cache_dir=str(tmp_path / "cache")))
    assert fetched == []


def test_resolve_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("NMT_DATA_DIR", raising=False)
    assert resolve_data_dir(None) is None
    monkeypatch.setenv("NMT_DATA_DIR", str(tmp_path))
    assert resolve_data_dir(None) == tmp_path
    (tmp_path / "flag").mkdir()
    assert resolve_data_dir(str(tmp_path / "flag")) == tmp_path / "flag"
    with pytest.raises(CorpusError, match="--data-dir"):
        resolve_data_dir(str(tmp_path / "nope"))
    monkeypatch.setenv("NMT_DATA_DIR", str(tmp_path / "nope"))
    with pytest.raises(CorpusError, match="NMT_DATA_DIR"):
        resolve_data_dir(None)


def test_default_cache_dir_in_checkout():
    assert default_cache_dir() == REPO / "data" / "cache"


# --- python-docs cleaning ------------------------------------------------------------------------------------

def test_clean_rest_docs():
    ko = [":func:`len`\\은 길이를 반환합니다.", "``S`` (:class:`bytes`)", "os.sep", "해당 없음", "``x = 1``"]
    en = ["Return the length, see :func:`len`.", "``S`` (:class:`bytes`)", "os.sep", "N/A", "Set ``x``."]
    kept, counts = clean_rest_docs(Pairs(ko, en, "docs"))
    assert kept.src == ["len은 길이를 반환합니다."] and kept.tgt == ["Return the length, see len."]
    assert counts == {"identical": 2, "code_only": 1, "no_hangul": 1}


def test_clean_rest_docs_renders_substitutions_or_removes_them_from_both_sides():
    """python-docs-ko kept |version|, |flag_r| and 11 other substitutions in 16 of the pairs it trained on (44 times
    in their two sides): those that show code or a name are rendered as the page shows them on both sides; one that
    shows a sentence that neither side holds (dbm's open() flags, ftplib's parameters) is removed from both."""
    ko = ["네 개의 파이썬 |version| 설치 프로그램", "``'r'`` (기본값): |flag_r|", "|param_doc_user| 주어지면, 호출합니다.",
          "자세한 정보는 |http_error_nnn|_\\을 참조하십시오.", "정규식 (blue|white|red)를 보세요."]
    en = ["Four Python |version| installers", "``'r'`` (default): |flag_r|", "|param_doc_user| If given, it is called.",
          "See |http_error_nnn|_ for more information.", "See the regular expression (blue|white|red)."]
    kept, counts = clean_rest_docs(Pairs(ko, en, "docs"))
    assert kept.src == ["네 개의 파이썬 3.13 설치 프로그램", "'r' (기본값):", "주어지면, 호출합니다.",
                        "자세한 정보는 BaseHandler.http_error_<nnn>을 참조하십시오.", ko[4]]
    assert kept.tgt == ["Four Python 3.13 installers", "'r' (default):", "If given, it is called.",
                        "See BaseHandler.http_error_<nnn> for more information.", en[4]]
    assert counts == {}


# --- load_data -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, flag", [({"recipe": "nope"}, "--recipe 'nope'"), ({"recipe": None}, "--recipe"),
                                          ({"src_lang": "en"}, "--src and --tgt"), ({"tgt_lang": "ja"}, "--tgt"),
                                          ({"train_src": "a"}, "--train-tgt"),
                                          ({"train_src": "a", "train_tgt": "b", "dev_src": "c"}, "--dev-tgt")])
def test_load_data_config_errors(kwargs, flag):
    with pytest.raises(ConfigError) as e:
        load_data(DataConfig(**kwargs))
    assert flag in str(e.value)
    if kwargs.get("recipe") == "nope":
        assert "all, tatoeba" in str(e.value)


def test_load_data_explicit_files(write_file):
    cfg = DataConfig(src_lang="en", tgt_lang="ko", max_chars=50, max_ratio=4.0,
                     train_src=str(write_file("tr.en", ["Hello.", "Dev sentence.", "Hello.", "", "Cat.", "Test one."])),
                     train_tgt=str(write_file("tr.ko", ["안녕.", "다른 번역.", "안녕.", "빈.", "고양이.", "시험."])),
                     dev_src=str(write_file("dv.en", ["Dev sentence."])), dev_tgt=str(write_file("dv.ko", ["개발."])),
                     test_src=str(write_file("te.en", ["Other."])), test_tgt=str(write_file("te.ko", ["시험."])))
    splits = load_data(cfg)
    assert splits.train.src == ["Hello.", "Cat."] and splits.train.tgt == ["안녕.", "고양이."]
    assert splits.dev.src == ["Dev sentence."] and list(splits.tests) == ["test"]
    assert splits.drops == {"overlap:dev": 1, "duplicate": 1, "overlap:test": 1, "empty_line": 1}


def test_a_test_set_of_files_is_read_whole(write_file, tmp_path, nmt_logs):
    """A test set's pairs with a blank side were dropped: the run scored 298 of 300 lines where nmt-evaluate on the
    same files scored 300; with --skip-invalid-utf8 its undecodable lines went too (nmt-evaluate offers no skipping:
    a test set with lines dropped is another test set). A test source line of any length is the Translator's to cut."""
    train = dict(train_src=str(write_file("tr.en", ["Hello.", "Cat."])), train_tgt=str(write_file("tr.ko", ["안녕.",
                 "고양이."])), dev_src=str(write_file("dv.en", ["Dev."])), dev_tgt=str(write_file("dv.ko", ["개발."])))
    long = "Long " * 5000
    cfg = DataConfig(src_lang="en", tgt_lang="ko", skip_invalid_utf8=True, **train,
                     test_src=str(write_file("te.en", ["One.", "", "Three.", long])),
                     test_tgt=str(write_file("te.ko", ["하나.", "둘.", "", "길다."])))
    test = load_data(cfg).tests["test"]
    assert test.src == ["One.", "", "Three.", long.strip()] and test.tgt == ["하나.", "둘.", "", "길다."]
    assert not [r for r in nmt_logs if "dropped" in r.getMessage()]   # but warned of, as nmt-evaluate warns
    assert [r for r in nmt_logs if "2 line(s) blank on one side only (line 2, 3)" in r.getMessage()]
    from nmt.scoring import recipe_tests   # nmt-evaluate --recipe-tests reads them as training did
    assert recipe_tests(Config(data=cfg))["test"].src == test.src
    (tmp_path / "bad.ko").write_bytes("하나.\n".encode() + b"\xff\n" + "셋.\n길다.\n".encode())
    with pytest.raises(CorpusError, match=r"bad.ko:2: invalid UTF-8 .*\) \(--skip-invalid-utf8 drops lines of "
                                          r"training and dev files only: a test set is scored whole\)\.$"):
        load_data(dataclasses.replace(cfg, test_tgt=str(tmp_path / "bad.ko")))   # (the flag given: said, not ignored)
    with pytest.raises(CorpusError, match=r"bad.ko:2: invalid UTF-8 .*\)\.$") as e:
        load_data(dataclasses.replace(cfg, test_tgt=str(tmp_path / "bad.ko"), skip_invalid_utf8=False))
    assert "skip-invalid-utf8" not in str(e.value)


def test_files_replace_the_default_recipe_in_python(monkeypatch):
    """train(Config.from_dict(...)) with training files kept the default recipe "tatoeba" in config.json (the command
    line records none), and nmt-evaluate --recipe-tests then scored Tatoeba's test set for the model."""
    from nmt import train as train_module
    got = []
    monkeypatch.setattr(train_module, "run_training", lambda cfg, *args: got.append(cfg))
    cfg = Config.from_dict({"data": {"train_src": "tr.ko", "train_tgt": "tr.en"}})
    train_module.train(cfg)
    assert cfg.data.recipe == "tatoeba" and got[0].data.recipe is None and got[0].data.train_src == cfg.data.train_src
    train_module.train(Config.from_dict({}))
    assert got[1].data.recipe == "tatoeba"
    train_module.train(cfg, resume=True)   # and so on resume, whose run's config.json names none
    assert got[2].data.recipe is None


def test_a_training_file_that_is_a_pipe_is_warned_of(write_file, tmp_path, nmt_logs):
    """Read once, a pipe (--train-src <(...), a FIFO) cannot be read again on --resume, where a FIFO blocked."""
    fifo = tmp_path / "fifo.en"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("Hello.\nCat.\n"))
    writer.start()
    load_data(DataConfig(src_lang="en", tgt_lang="ko", train_src=str(fifo), train_tgt=str(write_file("tr.ko", [
        "안녕.", "고양이."])), dev_src=str(write_file("dv.en", ["Dev."])), dev_tgt=str(write_file("dv.ko", ["개발."]))))
    writer.join()
    said = "\n".join(r.getMessage() for r in nmt_logs)
    assert f"--train-src {fifo} is not a regular file (a pipe?): it can be read only once, so this run cannot be " \
           "resumed" in said
    assert "--train-tgt" not in said and "--dev-src" not in said


@pytest.mark.parametrize("direction", [("ko", "en"), ("en", "ko")])
def test_swapped_or_one_language_files_are_refused(write_file, direction):
    """Files given the wrong way round (or one file twice) would train the other direction, or a copy model."""
    ko = str(write_file("t.ko", ["안녕하세요.", "고양이가 있다.", "OK 좋아요.", "2024"]))   # Hangul on 75% of lines
    en = str(write_file("t.en", ["Hello.", "There is a cat.", "OK 좋아요.", "2024"]))    # and on 25%: still right
    dev = {"ko": str(write_file("d.ko", ["개발."])), "en": str(write_file("d.en", ["Dev."]))}
    src_lang, tgt_lang = direction
    right = {"ko": ko, "en": en}
    good = DataConfig(recipe=None, src_lang=src_lang, tgt_lang=tgt_lang, train_src=right[src_lang],
                      train_tgt=right[tgt_lang], dev_src=dev[src_lang], dev_tgt=dev[tgt_lang])
    assert load_data(good).train.src[0] == ("안녕하세요." if src_lang == "ko" else "Hello.")
    ko_side, en_side = ("src", "tgt") if src_lang == "ko" else ("tgt", "src")
    other_ko = write_file("other.ko", ["다른 문장.", "개.", "네.", "2025"])   # (both Korean, two files)
    other_en = [write_file(f"other{i}.en", ["Other.", "A dog.", "Yes.", "2025"]) for i in (1, 2)]   # (no Hangul)
    # Korean UTF-8 read as Windows-1252 (its five undefined bytes as C1 controls) and saved again ("are both files
    # English?" said nothing of it); the command given writes the file back
    korean = "안녕하세요.\r\n고양이가 있다.\r\nOK 좋아요.\r\n2024 년\r\n"   # (CRLF, and the export's BOM: kept, dropped)
    twice = str(write_file("twice.ko", "\ufeff" + "".join(bytes([b]).decode("cp1252", "ignore") or chr(b)
                                                          for b in korean.encode())))
    for kind, files, side, says in (
            ("train", (right[tgt_lang], right[src_lang]), ko_side, "are the files swapped?"),
            ("dev", (dev[tgt_lang], dev[src_lang]), ko_side, "are the files swapped?"),
            ("train", (ko, ko), en_side, "the same file is given for both sides"),
            ("train", (en, en), ko_side, "the same file is given for both sides"),   # (the English file: Korean named)
            ("train", (ko, str(other_ko)), en_side, "is it the Korean file again?"),
            ("train", tuple(map(str, other_en)), ko_side, "are both files English?"),
            ("train", (twice, en) if src_lang == "ko" else (en, twice), ko_side,
             f" > {shell_word(Path(twice).with_name('twice.fixed.ko'))}`")):
        cfg = dataclasses.replace(good, **{f"{kind}_src": files[0], f"{kind}_tgt": files[1]})
        with pytest.raises(CorpusError) as e:
            load_data(cfg)
        language = "Korean" if side == ko_side else "English"   # (the side at fault is named)
        verb = "has Hangul" if side == ko_side else "is mostly Hangul"   # (English naming Korean things is English)
        assert (f"--{kind}-{side} {getattr(cfg, f'{kind}_{side}')} should be the {language} side (--src {src_lang} "
                f"--tgt {tgt_lang}) but {verb} on ") in str(e.value)
        assert str(e.value).endswith(says), str(e.value)
    undo = re.search("undo it, `(.*)`$", str(e.value))[1]
    subprocess.run(undo, shell=True, check=True)
    assert Path(twice).with_name("twice.fixed.ko").read_bytes() == korean.encode()
    from nmt.languages import _encoded_twice   # characters a decoder replaced: no command can write them back
    assert _encoded_twice(["ê³\ufffdë§ˆì›Œìš”."], twice).endswith("write it again from its source as UTF-8")
    # a decoder that skipped the bytes it had no character for ('ignore': Windows-1252's five undefined ones; the second
    # of these 4 lines holds one) left no trace in the text, and the command wrote that line back as invalid UTF-8
    lossy = write_file("lossy.ko", korean.encode().decode("cp1252", "ignore"))
    says = _encoded_twice(lossy.read_text(encoding="utf-8").splitlines(), str(lossy))
    assert "undo it" not in says and says.endswith("write it again from its source as UTF-8 (bytes were lost on the "
                                                   "way: its line 2 cannot be written back as UTF-8)"), says


def test_training_files_without_dev_files_hold_out_a_dev_set(write_file, monkeypatch, caplog):
    import nmt.recipes as recipes
    monkeypatch.setattr(recipes, "FILES_DEV_SIZE", 3)
    src = [f"Sentence {i}." for i in range(10)] + ["Test."]
    tgt = [f"문장 {i}." for i in range(10)] + ["시험."]
    cfg = DataConfig(recipe=None, train_src=str(write_file("tr.en", src)), train_tgt=str(write_file("tr.ko", tgt)),
                     test_src=str(write_file("te.en", ["Test."])), test_tgt=str(write_file("te.ko", ["시험."])),
                     src_lang="en", tgt_lang="ko")
    with caplog.at_level("INFO", logger="nmt.recipes"):
        splits = load_data(cfg)
    assert len(splits.dev) == 3 and len(splits.train) == 7   # the test pair is out of both
    assert sorted(splits.train.src + splits.dev.src) == sorted(src[:10])
    assert_no_shared_side(splits)
    assert load_data(cfg).dev.src == splits.dev.src   # the same split every time (nmt-evaluate --dev-set)
    held = [r for r in caplog.records if "no --dev-src/--dev-tgt" in r.message]
    assert held[0].message.startswith("no --dev-src/--dev-tgt: 3 random training pairs are the dev set: 3 (30% of "
                                      "them) not trained on")
    # 3 of 10 pairs: a warning that says how to train on all of them; 3 of 100 would be an INFO line
    assert held[0].levelname == "WARNING" and "give a dev set with --dev-src/--dev-tgt" in held[0].message
    # pairs sharing a side with a dev pair are out of training too: counted in what is not trained on
    twins = DataConfig(recipe=None, src_lang="en", tgt_lang="ko", train_src=str(write_file("tw.en", src[:10])),
                       train_tgt=str(write_file("tw.ko", [f"문장 {i % 5}." for i in range(10)])))
    caplog.clear()
    with caplog.at_level("INFO", logger="nmt.recipes"):
        split = load_data(twins)
    out = 10 - len(split.train)
    assert 3 < out and [r.message for r in caplog.records if "no --dev-src" in r.message][0].startswith(
        f"no --dev-src/--dev-tgt: 3 random training pairs are the dev set and {out - 3} share a side with one: {out} "
        f"({100 * out / 10:.0f}% of them) not trained on")
    many = DataConfig(recipe=None, src_lang="en", tgt_lang="ko",
                      train_src=str(write_file("m.en", [f"Sentence {i}." for i in range(100)])),
                      train_tgt=str(write_file("m.ko", [f"문장 {i}." for i in range(100)])))
    caplog.clear()
    with caplog.at_level("INFO", logger="nmt.recipes"):
        load_data(many)
    held = [r for r in caplog.records if "no --dev-src/--dev-tgt" in r.message]
    assert held[0].levelname == "INFO" and "(3% of them)" in held[0].message
    few = DataConfig(recipe=None, src_lang="en", tgt_lang="ko", train_src=str(write_file("f.en", src[:6])),
                     train_tgt=str(write_file("f.ko", tgt[:6])))
    with pytest.raises(CorpusError, match=r"6 training pairs after cleaning \(none dropped\), too few to hold out 3 "
                                          "for dev; give a dev set with --dev-src/--dev-tgt"):
        load_data(few)
    # the training files as the test set too: every pair is dropped as a test pair, and that is what is said (the
    # dev set's advice was followed by "no training pairs left")
    same = dataclasses.replace(many, test_src=many.train_src, test_tgt=many.train_tgt)
    with pytest.raises(CorpusError, match=r"no training pairs left after filtering \(overlap:test 100\)"):
        load_data(same)


def _synthetic_recipe(monkeypatch, tmp_path, n=300):
    """A registered recipe over synthetic tsv (train) and parallel (test) sources in a tmp mirror."""
    mirror = tmp_path / "mirror"
    rows = [(f"Sentence number {i % 250}.", f"{i % 270}번 문장.") for i in range(n)]   # repeats on both sides
    rows += rows[10:15]                                                                 # and exact duplicates
    tsv = "".join(f"{en}\t{ko}\tCC-BY #{i}\n" for i, (en, ko) in enumerate(rows)).encode()
    test_ko, test_en = "7번 문장.\n없는 문장.\n".encode(), b"Nothing.\nSentence number 8.\n"
    train = _source({"tsv": tsv}, name="syn-train")
    test = _source({"ko": test_ko, "en": test_en}, name="syn-test")
    for src, body in ((train, {"tsv": tsv}), (test, {"ko": test_ko, "en": test_en})):
        for key, data in body.items():
            (mirror / src.files[key].path).parent.mkdir(parents=True, exist_ok=True)
            (mirror / src.files[key].path).write_bytes(data)
    monkeypatch.setitem(SOURCES, "syn-train", train)
    monkeypatch.setitem(SOURCES, "syn-test", test)
    monkeypatch.setitem(RECIPES, "syn", Recipe("syn", "synthetic", ["syn-train"], {"syn-test": "syn-test"}, 40, 3))
    return mirror, rows


def test_a_recipe_of_too_few_pairs_to_hold_out_dev_says_how_many_it_needs(monkeypatch, tmp_path):
    """A recipe whose cleaning leaves no more pairs than its dev set is a `TooFewPairs`, with the pairs left and the
    pairs needed (one more than the dev set): a resumed run had them, and is refused as given other data with these
    figures (`nmt.data.build_data`), not told to relax a cleaning a resume cannot change."""
    from nmt.textfile import TooFewPairs
    mirror, _ = _synthetic_recipe(monkeypatch, tmp_path, n=30)   # (its dev set: 40)
    monkeypatch.setenv("NMT_DATA_DIR", str(mirror))
    with pytest.raises(TooFewPairs, match=r"^recipe syn: only (\d+) training pairs left after cleaning, too few to "
                                          r"hold out 40 for dev; relax --max-chars/--max-ratio$") as e:
        load_data(DataConfig(recipe="syn", cache_dir=str(tmp_path / "cache")))
    assert e.value.left == int(str(e.value).split()[3]) and 0 < e.value.left <= 40 and e.value.needed == 41


def assert_no_shared_side(splits):
    for held in [splits.dev, *splits.tests.values()]:
        assert not set(splits.train.src) & set(held.src) and not set(splits.train.tgt) & set(held.tgt), held.name


def test_load_data_recipe_from_env_mirror(monkeypatch, tmp_path):
    mirror, rows = _synthetic_recipe(monkeypatch, tmp_path)
    monkeypatch.setenv("NMT_DATA_DIR", str(mirror))
    cfg = DataConfig(recipe="syn", cache_dir=str(tmp_path / "cache"))
    ko_en = load_data(cfg)
    assert len(ko_en.dev) == 40 and len(ko_en.tests["syn-test"]) == 2 and ko_en.tests["syn-test"].name == "syn-test"
    assert_no_shared_side(ko_en)
    assert len(ko_en.train) + len(ko_en.dev) + sum(ko_en.drops.values()) == len(rows)   # every row accounted for
    assert set(ko_en.drops) == {"overlap:syn-test", "duplicate", "overlap:dev"}
    assert load_data(cfg).dev.src == ko_en.dev.src                                        # fixed seed
    en_ko = load_data(DataConfig(recipe="syn", src_lang="en", tgt_lang="ko", cache_dir=str(tmp_path / "cache")))
    assert (en_ko.train.src, en_ko.train.tgt, en_ko.dev.src) == (ko_en.train.tgt, ko_en.train.src, ko_en.dev.tgt)
    assert en_ko.tests["syn-test"].src == ["Nothing.", "Sentence number 8."]
    assert files_in(tmp_path / "cache") == []                                              # mirror used, no download


def test_load_data_recipe_downloads_into_cache_dir(monkeypatch, tmp_path, server):
    mirror, rows = _synthetic_recipe(monkeypatch, tmp_path)
    monkeypatch.delenv("NMT_DATA_DIR", raising=False)
    for src in (SOURCES["syn-train"], SOURCES["syn-test"]):
        for spec in src.files.values():
            server.routes["/" + spec.path] = (mirror / spec.path).read_bytes()
            monkeypatch.setattr(spec, "url", server.url + "/" + spec.path)
    splits = load_data(DataConfig(recipe="syn", cache_dir=str(tmp_path / "cache")))
    assert len(server.hits) == 3 and len(splits.dev) == 40
    assert files_in(tmp_path / "cache") == ["syn-test/syn-test.en", "syn-test/syn-test.ko", "syn-train/syn-train.tsv"]


# --- the real recipes (skipped without the mirror) ---------------------------------------------------------------


def test_upsample_names_each_corpus_once():
    tatoeba = RECIPES["tatoeba"]
    assert parse_upsample("tatoeba-manythings=3", tatoeba) == {"tatoeba-manythings": 3}
    with pytest.raises(ConfigError, match="--upsample 'tatoeba-manythings=2,tatoeba-manythings=3': "
                                          "tatoeba-manythings is given twice; give each corpus once"):
        parse_upsample("tatoeba-manythings=2,tatoeba-manythings=3", tatoeba)


def test_upsample_is_bounded():
    """--upsample tatoeba-manythings=100000000 made that many copies in memory until it ran out (MemoryError)."""
    tatoeba = RECIPES["tatoeba"]
    assert parse_upsample("tatoeba-manythings=1000", tatoeba) == {"tatoeba-manythings": 1000}
    with pytest.raises(ConfigError, match=r"--upsample 'tatoeba-manythings=100000000': tatoeba-manythings repeated "
                                          r"100000000 times would hold 100000000 copies of it in memory; give K <= 1000"):
        parse_upsample("tatoeba-manythings=100000000", tatoeba)


def test_upsample_needs_a_recipe(tmp_path):
    (tmp_path / "a.ko").write_text("가\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("a\n", encoding="utf-8")
    files = dict(train_src=str(tmp_path / "a.ko"), train_tgt=str(tmp_path / "a.en"), dev_src=str(tmp_path / "a.ko"),
                 dev_tgt=str(tmp_path / "a.en"))
    with pytest.raises(ConfigError, match="--upsample 'x=2' names corpora of a --recipe"):
        load_data(DataConfig(recipe=None, upsample="x=2", **files))


# --- duplicates: a corpus given twice is warned of; the shipped recipes are not --------------------------------

def test_training_files_given_twice_are_warned_of_naming_them(write_file, nmt_logs):
    """A file catted twice: half its pairs dropped as duplicates, with only an INFO line."""
    src, tgt = [f"Sentence {i}." for i in range(50)], [f"{i}번 문장." for i in range(50)]
    cfg = DataConfig(recipe=None, src_lang="en", tgt_lang="ko", train_src=str(write_file("tr.en", src * 2)),
                     train_tgt=str(write_file("tr.ko", tgt * 2)), dev_src=str(write_file("dv.en", ["Dev."])),
                     dev_tgt=str(write_file("dv.ko", ["개발."])))
    assert len(load_data(cfg).train) == 50
    warned = [r.getMessage() for r in nmt_logs if r.levelname == "WARNING"]
    assert warned == [f"{cfg.train_src} / {cfg.train_tgt}: kept 50 of 100 training pairs; dropped duplicate 50; 50 "
                      "of 100 training pairs (50%) are exact duplicates of earlier pairs and were dropped: was a file "
                      "concatenated twice, or a corpus given twice?"]


def test_dry_run_shows_the_duplicate_warning(tmp_path):
    """What `nmt-train --dry-run` prints (the warning on stderr, where nothing set up logging)."""
    from tests.synth import write_task
    task = write_task(tmp_path / "synth", n_train=200)
    for side in ("train_src", "train_tgt"):
        doubled = tmp_path / Path(task[side]).name
        doubled.write_text(Path(task[side]).read_text(encoding="utf-8") * 2, encoding="utf-8")
        task[side] = str(doubled)
    args = [x for k, v in task.items() for x in (f"--{k.replace('_', '-')}", v)]
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "train.py"), *args, "--model-dir", str(tmp_path / "m"),
                        "--vocab-size", "400", "--embed-size", "8", "--hidden-size", "8", "--num-layers", "1",
                        "--no-progress", "--dry-run"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0 and "nothing was trained" in r.stdout, r.stderr[-2000:]
    assert f"{task['train_src']} / {task['train_tgt']}: kept 200 of 400 training pairs" in r.stderr, r.stderr
    assert "200 of 400 training pairs (50%) are exact duplicates of earlier pairs and were dropped: was a file " \
           "concatenated twice" in r.stderr, r.stderr


@pytest.mark.parametrize("change, says", [
    (lambda s: s.update(format="csv"), "source 'x': format 'csv' (use parallel or tsv)"),
    (lambda s: s.update(clean="rest_docs"), "source 'x': clean 'rest_docs' (use rest-docs or leave it out)"),
    (lambda s: s["files"].pop("en"), "source 'x': files ['ko'] (format parallel needs ['en', 'ko'])"),
])
def test_a_registry_entry_nothing_reads_is_refused(tmp_path, change, says):
    """A typo in recipes.json ("rest_docs") trained on uncleaned text, and an unknown format read a source as
    parallel files: each is refused when the registry loads, naming the file and the entry."""
    spec = {"path": "x/x.ko", "sha256": "0" * 64, "bytes": 1, "url": "https://example.org/x"}
    source = {"title": "t", "license": "l", "citation": "c", "homepage": "h", "format": "parallel",
              "files": {"ko": dict(spec), "en": dict(spec, path="x/x.en")}}
    recipe = {"description": "d", "train": ["x"], "tests": {"x-test": "x"}, "dev_size": 1, "dev_seed": 1}
    path = tmp_path / "recipes.json"
    path.write_text(json.dumps({"sources": {"x": source}, "recipes": {"r": recipe}}))
    assert set(recipes._load_registry(path)[1]) == {"r"}
    change(source)
    path.write_text(json.dumps({"sources": {"x": source}, "recipes": {"r": recipe}}))
    with pytest.raises(ValueError) as e:
        recipes._load_registry(path)
    assert str(e.value) == f"{path}: {says}"


def test_a_recipe_naming_an_unknown_source_is_refused(tmp_path):
    path = tmp_path / "recipes.json"
    recipe = {"description": "d", "train": ["nope"], "tests": {}, "dev_size": 1, "dev_seed": 1}
    path.write_text(json.dumps({"sources": {}, "recipes": {"r": recipe}}))
    with pytest.raises(ValueError, match=r"recipe 'r' names unknown sources \['nope'\]"):
        recipes._load_registry(path)


def test_a_missing_data_dir_says_where_it_may_have_come_from(monkeypatch, tmp_path):
    """A model's recorded mirror, moved since: nmt-evaluate --recipe-tests said "--data-dir X: no such directory"
    of a flag the user never gave (the path was the one config.json records)."""
    from nmt.corpus import CorpusError
    from nmt.recipes import resolve_data_dir
    monkeypatch.delenv("NMT_DATA_DIR", raising=False)
    with pytest.raises(CorpusError, match=r"^--data-dir /nonexistent: no such directory \(given, from a --config "
                                          r"file, or recorded in a run's config.json: --data-dir given again replaces "
                                          r"it\); point it at"):
        resolve_data_dir("/nonexistent")
    moved = tmp_path / "mirror b"   # (a user who moved the mirror and set the variable to its new place)
    moved.mkdir()
    monkeypatch.setenv("NMT_DATA_DIR", str(moved))
    with pytest.raises(CorpusError, match=rf"replaces it; NMT_DATA_DIR={moved} counts only without it: --data-dir "
                                          rf"'{moved}'\); point it at"):
        resolve_data_dir("/nonexistent")
    monkeypatch.setenv("NMT_DATA_DIR", "/gone")   # (not there either: not advised)
    with pytest.raises(CorpusError, match=r"replaces it\); point it at"):
        resolve_data_dir("/nonexistent")
    assert resolve_data_dir(str(moved)) == moved   # (a --data-dir that is there: the variable is not looked at)
    with pytest.raises(CorpusError, match="^NMT_DATA_DIR /gone: no such directory; point it at"):
        resolve_data_dir(None)
