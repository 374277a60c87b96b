"""``odeformer-data``: downloads from a local HTTP server (127.0.0.1, an ephemeral port) serving the tiny dataset files,
with their checksums passed in through ``main(..., sources=...)``: success, idempotence, selection by name, resume,
and each failure (wrong checksum, truncated body, 404, server down) as one line, exit 1, nothing under the final name.
"""

import hashlib
import http.server
import os
import re
import socket
import threading
import urllib.parse
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

from odeformer.app.commands import data as fetch_module
from odeformer.app.commands.data import SOURCES, Remote, main
from odeformer.data import load
from odeformer.data.planetoid import PICKLES
from odeformer.data.sst2 import FILES as SST2_FILES

ALL_PATHS = [remote.path for remotes in SOURCES.values() for remote in remotes]
REAL_ROOT = os.environ.get("ODEFORMER_DATA")  # read (never written) by the test marked `data`


@pytest.fixture(autouse=True)
def _no_real_root(monkeypatch):
    """No test here may see the real data root: each downloads into a temporary one it names."""
    monkeypatch.delenv("ODEFORMER_DATA", raising=False)
    monkeypatch.delenv("ODEFORMER_DATA_MIRROR", raising=False)


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET of a file under the server's ``root``, honouring ``Range: bytes=N-`` when ``server.ranges``; a path in
    ``server.cut`` sends only that many bytes of its body, under the full Content-Length, then hangs up."""

    def do_GET(self):
        server = self.server
        server.requests.append((self.path, self.headers.get("Range")))
        path = server.root / urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        if not path.is_file():
            self.send_error(404, "Not Found")
            return
        data = path.read_bytes()
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        start = 0
        if match and server.ranges:
            start = int(match[1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = server.cut.get(urllib.parse.urlsplit(self.path).path.lstrip("/"))
        self.wfile.write(body if cut is None else body[:cut])
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tiny_root, monkeypatch):
    """An HTTP server on 127.0.0.1 serving ``tiny_root`` (the data root layout), stopped after the test."""
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.root, httpd.requests, httpd.cut, httpd.ranges = tiny_root, [], {}, True
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=120)


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def sources(tiny_root, server):
    """The real table's files and layout with the tiny files' checksums and sizes; each canonical URL points at the
    server with a ``?canonical`` query, so that requests show whether the canonical URL or a mirror was used."""
    return {
        name: tuple(
            Remote(
                r.path,
                f"{server.url}/{r.path}?canonical",
                _sha(tiny_root / r.path),
                len((tiny_root / r.path).read_bytes()),
            )
            for r in remotes
        )
        for name, remotes in SOURCES.items()
    }


@pytest.fixture
def dest(tmp_path):
    return tmp_path / "dest"


def _run(capsys, sources, *args):
    """``odeformer-data args`` in process; returns ``(exit code, stdout, stderr)``."""
    try:
        code = main(["--quiet", "--timeout", "120", *args], sources=sources)
    except SystemExit as exit_:  # argparse errors
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def _error_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("odeformer-data: error: "), err
    return lines[0]


def _files(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file())


def test_fetch_downloads_verifies_and_the_loaders_read_the_result(capsys, sources, server, tiny_root, dest):
    code, out, err = _run(capsys, sources, "--root", str(dest), "--mirror", server.url)
    assert code == 0, err
    assert _files(dest) == sorted(ALL_PATHS)  # no .part left behind
    for path in ALL_PATHS:
        assert (dest / path).read_bytes() == (tiny_root / path).read_bytes()
    assert "cora: downloaded 8 of 8 files, verified" in out and f"ODEFORMER_DATA={dest}" in out
    assert all("canonical" not in path and rng is None for path, rng in server.requests)  # the mirror, whole files
    assert len(server.requests) == len(ALL_PATHS)
    for name in ("planetoid", "shakespeare", "sst2"):
        fresh, original = load(name, dest), load(name, tiny_root)
        assert all(torch.equal(a, b) for a, b in zip(fresh.splits["train"], original.splits["train"]))


def test_second_run_downloads_nothing(capsys, sources, server, dest):
    assert _run(capsys, sources, "--root", str(dest))[0] == 0
    stamps = {path: (dest / path).stat().st_mtime_ns for path in ALL_PATHS}
    before = len(server.requests)
    code, out, _ = _run(capsys, sources, "--root", str(dest))
    assert code == 0 and len(server.requests) == before
    assert "sst2: all 3 files already present, verified" in out
    assert stamps == {path: (dest / path).stat().st_mtime_ns for path in ALL_PATHS}


def test_canonical_urls_unless_a_mirror_is_given(capsys, sources, server, dest, monkeypatch):
    assert _run(capsys, sources, "shakespeare", "--root", str(dest))[0] == 0
    assert server.requests == [("/text/tinyshakespeare.txt?canonical", None)]
    monkeypatch.setenv("ODEFORMER_DATA_MIRROR", server.url + "/")
    monkeypatch.setenv("ODEFORMER_DATA", str(dest))  # the root from the environment
    code, out, _ = _run(capsys, sources, "sst2")
    assert code == 0 and "set ODEFORMER_DATA" not in out
    assert [path for path, _ in server.requests[1:]] == ["/sst2/train.tsv", "/sst2/dev.tsv", "/sst2/test.tsv"]


def test_datasets_are_selected_by_name(capsys, sources, server, dest):
    code, _, _ = _run(capsys, sources, "sst2", "shakespeare", "sst2", "--root", str(dest))
    assert code == 0
    assert _files(dest) == ["sst2/dev.tsv", "sst2/test.tsv", "sst2/train.tsv", "text/tinyshakespeare.txt"]
    code, _, err = _run(capsys, sources, "cora", "citeseer", "--root", str(dest))
    assert code == 2 and "unknown dataset(s) 'citeseer'; choose from: cora, shakespeare, sst2." in err
    assert not (dest / "planetoid").exists()


def test_no_root_is_one_line_naming_odeformer_data(capsys, sources):
    code, _, err = _run(capsys, sources)
    assert code == 2
    assert err.splitlines()[-1].endswith(
        "no data root: pass --root DIR or set ODEFORMER_DATA to the folder the loaders read."
    )
    code, out, err = _run(capsys, sources, "--list")  # listing is not a failure: `make data ARGS=--list` passes
    assert (
        code == 0
        and not err
        and out.splitlines()
        == ["no data root: nothing to list (pass --root DIR or set ODEFORMER_DATA; `odeformer-data` fills it)."]
    )
    code, _, err = _run(capsys, sources, "--list", "nonsense")
    assert code == 2 and "unknown dataset(s) 'nonsense'" in err.splitlines()[-1]
    code, _, err = _run(capsys, sources, "--root", "somewhere", "--timeout", "0")
    assert code == 2 and err.splitlines()[-1].endswith("--timeout must be a positive number of seconds, got 0.0.")


def test_wrong_checksum_is_one_line_and_leaves_nothing(capsys, sources, server, dest):
    bad = dict(sources)
    train, dev, test = sources["sst2"]
    bad["sst2"] = (train, Remote(dev.path, dev.url, "0" * 64, dev.size), test)
    code, _, err = _run(capsys, bad, "sst2", "--root", str(dest))
    line = _error_line(err)
    assert code == 1 and "checksum mismatch" in line and f"{server.url}/sst2/dev.tsv" in line and "0" * 64 in line
    assert _files(dest) == ["sst2/train.tsv"]  # verified before; the bad file neither under its name nor as .part
    assert "/sst2/test.tsv?canonical" not in [path for path, _ in server.requests]  # stopped at the failure


def test_truncated_download_keeps_the_part_and_the_next_run_resumes_it(capsys, sources, server, tiny_root, dest):
    path = "text/tinyshakespeare.txt"
    size = (tiny_root / path).stat().st_size
    server.cut[path] = 50
    code, _, err = _run(capsys, sources, "shakespeare", "--root", str(dest))
    line = _error_line(err)
    assert code == 1 and f"broke off after 50 of {size} bytes" in line and "run again to resume" in line
    assert not (dest / path).exists()
    assert (dest / (path + ".part")).read_bytes() == (tiny_root / path).read_bytes()[:50]
    del server.cut[path]
    assert _run(capsys, sources, "shakespeare", "--root", str(dest))[0] == 0
    assert server.requests[-1] == (f"/{path}?canonical", "bytes=50-")
    assert (dest / path).read_bytes() == (tiny_root / path).read_bytes() and _files(dest) == [path]


@pytest.mark.parametrize("ranges", [True, False])  # a server that ignores Range sends the whole file again
def test_partial_part_file_is_resumed(capsys, sources, server, tiny_root, dest, ranges):
    server.ranges = ranges
    path = "sst2/train.tsv"
    part = dest / (path + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes((tiny_root / path).read_bytes()[:20])
    assert _run(capsys, sources, "sst2", "--root", str(dest))[0] == 0
    assert server.requests[0] == (f"/{path}?canonical", "bytes=20-")
    assert (dest / path).read_bytes() == (tiny_root / path).read_bytes() and not part.exists()


def test_wrong_part_file_is_deleted_after_the_checksum_fails(capsys, sources, server, tiny_root, dest):
    path = "sst2/dev.tsv"
    part = dest / (path + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"X" * 10)  # not a prefix of the file: the resumed whole fails its checksum
    code, _, err = _run(capsys, sources, "sst2", "--root", str(dest))
    assert code == 1 and "checksum mismatch" in _error_line(err)
    assert not part.exists() and not (dest / path).exists()
    assert _run(capsys, sources, "sst2", "--root", str(dest))[0] == 0  # and the next run starts afresh
    assert (dest / path).read_bytes() == (tiny_root / path).read_bytes()


def test_part_file_longer_than_the_file_starts_again(capsys, sources, server, tiny_root, dest):
    path = "text/tinyshakespeare.txt"
    part = dest / (path + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"X" * 10_000)
    assert _run(capsys, sources, "shakespeare", "--root", str(dest))[0] == 0
    assert server.requests == [(f"/{path}?canonical", None)]
    assert (dest / path).read_bytes() == (tiny_root / path).read_bytes()


def test_server_whose_file_is_too_short(capsys, sources, server, dest):
    (text,) = sources["shakespeare"]
    longer = {"shakespeare": (Remote(text.path, text.url, text.sha256, text.size + 7),)}
    code, _, err = _run(capsys, longer, "--root", str(dest))
    line = _error_line(err)
    assert code == 1 and f"is {text.size} bytes, expected {text.size + 7}" in line
    assert _files(dest) == []


def test_missing_file_on_the_server_is_a_404_line(capsys, sources, server, tiny_root, dest):
    (tiny_root / "planetoid" / "ind.cora.graph").unlink()
    code, _, err = _run(capsys, sources, "cora", "--root", str(dest))
    line = _error_line(err)
    assert code == 1 and "HTTP 404" in line and "/planetoid/ind.cora.graph" in line
    assert not (dest / "planetoid" / "ind.cora.graph").exists()
    assert not (dest / "planetoid" / "ind.cora.graph.part").exists()


def test_server_down_is_one_line(capsys, sources, dest):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = _run(capsys, sources, "--root", str(dest), "--mirror", f"http://127.0.0.1:{port}")
    line = _error_line(err)
    assert code == 1 and f"cannot reach http://127.0.0.1:{port}/planetoid/ind.cora.x" in line and "refused" in line
    assert _files(dest) == []


def test_list_says_present_missing_or_corrupt_and_where(capsys, sources, server, tiny_root, dest):
    code, out, _ = _run(capsys, sources, "--list", "--root", str(dest))
    assert code == 0 and out.splitlines()[0] == f"data root {dest} (from --root)"  # a report, not a failure
    assert f"missing: train.tsv, dev.tsv, test.tsv in {dest / 'sst2'}" in out
    assert _run(capsys, sources, "--root", str(dest))[0] == 0
    code, out, _ = _run(capsys, sources, "--list", "--root", str(dest))
    assert code == 0
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [
        ["cora", "present"],
        ["shakespeare", "present"],
        ["sst2", "present"],
    ]
    assert out.splitlines()[1].endswith(str(dest / "planetoid"))
    (dest / "sst2" / "dev.tsv").write_text("tampered\t1\n")
    (dest / "sst2" / "test.tsv").unlink()
    (dest / "sst2" / "test.tsv.part").write_bytes(b"abc")
    code, out, _ = _run(capsys, sources, "--list", "sst2", "--root", str(dest))
    size = sources["sst2"][2].size
    assert code == 0 and out.splitlines()[1] == (
        f"sst2         corrupt  corrupt: dev.tsv in {dest / 'sst2'}; "
        f"missing: test.tsv (3 of {size} bytes in test.tsv.part) in {dest / 'sst2'}"
    )


def test_a_file_with_the_wrong_checksum_is_kept_unless_forced(capsys, sources, server, tiny_root, dest):
    assert _run(capsys, sources, "sst2", "--root", str(dest))[0] == 0
    mine = dest / "sst2" / "dev.tsv"
    mine.write_text("my own sentences\t1\n")
    code, _, err = _run(capsys, sources, "sst2", "--root", str(dest))
    line = _error_line(err)
    assert code == 1 and f"{mine} exists but is not the expected file" in line and "--force" in line
    assert mine.read_text() == "my own sentences\t1\n"
    assert _run(capsys, sources, "sst2", "--root", str(dest), "--force")[0] == 0
    assert mine.read_bytes() == (tiny_root / "sst2" / "dev.tsv").read_bytes()
    assert _run(capsys, sources, "--list", "sst2", "--root", str(dest))[0] == 0


def test_progress_bar_on_request(capsys, sources, server, dest):
    fetch_module.fetch(dest, ["shakespeare"], sources=sources, progress=True)
    err = capsys.readouterr().err
    assert "text/tinyshakespeare.txt" in err and "100%" in err
    fetch_module.fetch(dest, ["sst2"], sources=sources, progress=False)
    assert capsys.readouterr().err == ""


def test_the_real_table_pins_each_file_to_a_commit_of_its_source():
    assert list(SOURCES) == ["cora", "shakespeare", "sst2"]
    assert [r.path for r in SOURCES["cora"]] == [f"planetoid/ind.cora.{part}" for part in (*PICKLES, "test.index")]
    assert [r.path for r in SOURCES["shakespeare"]] == ["text/tinyshakespeare.txt"]
    assert [r.path for r in SOURCES["sst2"]] == [f"sst2/{name}" for name in SST2_FILES.values()]
    repos = {"cora": "kimiyoung/planetoid", "shakespeare": "karpathy/char-rnn", "sst2": "forest-snow/alps"}
    for name, remotes in SOURCES.items():
        for remote in remotes:
            pinned = rf"https://raw\.githubusercontent\.com/{repos[name]}/[0-9a-f]{{40}}/data/\S+"
            assert re.fullmatch(pinned, remote.url), remote.url
            assert re.fullmatch(r"[0-9a-f]{64}", remote.sha256) and remote.size > 0
    assert len(set(ALL_PATHS)) == len(ALL_PATHS)


@pytest.mark.data
def test_the_real_files_match_the_table(capsys):
    code, out, _ = _run(capsys, None, "--list", "--root", REAL_ROOT)  # checksums of every file there
    assert code == 0, out


def test_console_script_is_installed():
    scripts = entry_points(group="console_scripts", name="odeformer-data")  # one per sys.path entry holding it
    assert scripts and {script.value for script in scripts} == {"odeformer.app.commands.data:main"}
    assert next(iter(scripts)).load() is main
