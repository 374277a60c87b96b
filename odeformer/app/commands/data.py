"""``odeformer-data``: download the file-based datasets into the data root, verify them, say what is there.

    odeformer-data                      # everything, into $ODEFORMER_DATA
    odeformer-data cora sst2 --root DIR # some datasets, into DIR
    odeformer-data --list               # present / missing / corrupt, and where

Each file comes from its canonical public source pinned to one commit (``SOURCES``) and is checked against its size
and SHA-256 before it gets its final name; ``docs/training.md`` ("Downloading the data") says how a download
resumes, what ``--force`` and ``--mirror`` do and what the exit status means.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from ...data import ENV_VAR, one_line
from ...data.sources import SOURCES, Remote, Sources
from . import Parser, run

MIRROR_VAR = "ODEFORMER_DATA_MIRROR"
CHUNK = 1 << 16


class FetchError(RuntimeError):
    """A download failed; the message is one line naming the file or URL and what went wrong."""


def select(names: Iterable[str] | None, sources: Sources = SOURCES) -> list[str]:
    """``names`` checked against ``sources`` (all of them when None or empty), in the order given, without repeats."""
    names = list(names or sources)
    unknown = [name for name in names if name not in sources]
    if unknown:
        raise ValueError(f"unknown dataset(s) {', '.join(map(repr, unknown))}; choose from: {', '.join(sources)}.")
    return list(dict.fromkeys(names))


def data_root(root: str | os.PathLike | None) -> Path:
    """``root``, else ``$ODEFORMER_DATA``; a one-line ValueError when neither is set."""
    root = root or os.environ.get(ENV_VAR) or None
    if root is None:
        raise ValueError(f"no data root: pass --root DIR or set {ENV_VAR} to the folder the loaders read.")
    return Path(root).expanduser()


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def state(root: Path, remote: Remote) -> str:
    """``present`` (right size and checksum), ``corrupt`` (a file of the wrong size or checksum) or ``missing``."""
    path = root / remote.path
    if not path.is_file():
        return "missing"
    if path.stat().st_size != remote.size or sha256(path) != remote.sha256:
        return "corrupt"
    return "present"


def missing(root: str | os.PathLike, names: Iterable[str] | None = None, sources: Sources = SOURCES) -> list[Path]:
    """The files of the datasets ``names`` (default all) that do not exist under ``root`` (no checksum: fast)."""
    root = Path(root)
    return [root / r.path for name in select(names, sources) for r in sources[name] if not (root / r.path).is_file()]


def _url(remote: Remote, mirror: str | None) -> str:
    return f"{mirror.rstrip('/')}/{remote.path}" if mirror else remote.url


def _reason(error: BaseException) -> str:
    reason = getattr(error, "reason", None) or error
    return one_line(reason) or type(error).__name__


def _stream(url: str, part: Path, remote: Remote, timeout: float, progress: bool | None) -> None:
    """Append ``url``'s bytes to ``part`` from its current size on (a Range request), or rewrite it from the start
    when the server sends the whole file; stop at ``remote.size``. A download that breaks off keeps ``part``."""
    have = part.stat().st_size if part.exists() else 0
    if have > remote.size:  # not a prefix of this file
        part.unlink()
        have = 0
    if have == remote.size:
        return
    request = urllib.request.Request(url, headers={"User-Agent": "odeformer-data"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:  # the range is past the server's file: start again
            part.unlink()
            return _stream(url, part, remote, timeout, progress)
        raise FetchError(f"cannot download {url}: HTTP {error.code} {one_line(error.reason)}.") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
        raise FetchError(f"cannot reach {url}: {_reason(error)}.") from None
    with response:
        content_range = response.headers.get("Content-Range", "")
        if not (have and response.status == 206 and content_range.startswith(f"bytes {have}-")):
            have = 0  # the server ignored the range and sends the whole file
        length = response.headers.get("Content-Length")
        expected = have + int(length) if length and length.isdigit() else None
        got = have
        with (
            open(part, "ab" if have else "wb") as f,
            tqdm(
                total=remote.size,
                initial=have,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=remote.path,
                disable=None if progress is None else not progress,
                leave=True,
                file=sys.stderr,
            ) as bar,
        ):
            try:
                while got < remote.size and (chunk := response.read(min(CHUNK, remote.size - got))):
                    f.write(chunk)
                    got += len(chunk)
                    bar.update(len(chunk))
            except (http.client.HTTPException, OSError) as error:
                raise FetchError(
                    f"download of {url} broke off after {got} of {remote.size} bytes ({_reason(error)}); "
                    f"run again to resume from {part}."
                ) from None
            finally:
                f.flush()
                os.fsync(f.fileno())
        if got < remote.size and expected is not None:
            if got < expected:
                raise FetchError(
                    f"download of {url} broke off after {got} of {remote.size} bytes (the server promised "
                    f"{expected}); run again to resume from {part}."
                )
            part.unlink()  # the server's whole file is too short: it is not this file
            raise FetchError(f"{url} is {got} bytes, expected {remote.size}; the download was deleted.")


def fetch_file(
    root: Path,
    remote: Remote,
    mirror: str | None = None,
    timeout: float = 30.0,
    progress: bool | None = None,
    force: bool = False,
) -> bool:
    """Make ``root/remote.path`` the verified file; return whether it had to be downloaded.

    The bytes go to ``<path>.part``; only a ``.part`` of the right size and SHA-256 is renamed (atomically) to
    ``<path>``. A ``.part`` with the wrong checksum is deleted, one that is too short is kept for resuming. An
    existing ``<path>`` with the wrong checksum is a :class:`FetchError` unless ``force``, which replaces it.
    """
    path = root / remote.path
    found = state(root, remote)
    if found == "present":
        return False
    if found == "corrupt" and not force:
        raise FetchError(
            f"{path} exists but is not the expected file (size or sha256 differ); move it away, or pass --force to "
            "replace it."
        )
    url = _url(remote, mirror)
    part = path.with_name(path.name + ".part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise FetchError(f"cannot create {path.parent}: {_reason(error)}.") from None
    _stream(url, part, remote, timeout, progress)
    size = part.stat().st_size
    if size < remote.size:
        raise FetchError(
            f"download of {url} ended after {size} of {remote.size} bytes; run again to resume from {part}."
        )
    digest = sha256(part)
    if digest != remote.sha256:
        part.unlink()
        raise FetchError(
            f"checksum mismatch for {url}: sha256 {digest}, expected {remote.sha256}; the download was deleted."
        )
    os.replace(part, path)
    return True


def fetch(
    root: str | os.PathLike | None = None,
    names: Iterable[str] | None = None,
    mirror: str | None = None,
    sources: Sources = SOURCES,
    timeout: float = 30.0,
    progress: bool | None = None,
    out: TextIO | None = None,
    force: bool = False,
) -> None:
    """Download the datasets ``names`` (default all) into ``root`` (default ``$ODEFORMER_DATA``); stop at the first
    failure with :class:`FetchError`. ``mirror`` defaults to ``$ODEFORMER_DATA_MIRROR``; ``progress`` None shows
    bars on a terminal only; ``force`` replaces files that are there with the wrong checksum. One line per dataset
    goes to ``out`` (default stdout)."""
    out = sys.stdout if out is None else out
    root = data_root(root)
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_VAR) or None
    for name in select(names, sources):
        fetched = sum(fetch_file(root, remote, mirror, timeout, progress, force) for remote in sources[name])
        total = len(sources[name])
        how = f"downloaded {fetched} of {total} files" if fetched else f"all {total} files already present"
        print(f"{name}: {how}, verified, in {root}", file=out)


def listing(root: Path, names: Iterable[str] | None = None, sources: Sources = SOURCES) -> tuple[list[str], bool]:
    """Lines saying for each dataset whether it is present, missing or corrupt, and where; and whether all are
    present. A dataset's state is its worst file's (corrupt, then missing); the line names those files."""
    lines, complete = [], True
    for name in select(names, sources):
        states = [(remote, state(root, remote)) for remote in sources[name]]
        bad = [(remote, s) for remote, s in states if s != "present"]
        if not bad:
            where = sorted({str((root / remote.path).parent) for remote in sources[name]})
            lines.append(f"{name:<12} present  {', '.join(where)}")
            continue
        complete = False
        worst = "corrupt" if any(s == "corrupt" for _, s in bad) else "missing"
        groups: dict[tuple[str, Path], list[str]] = {}
        for remote, s in sorted(bad, key=lambda item: item[1]):  # corrupt before missing
            path = root / remote.path
            part = path.with_name(path.name + ".part")
            extra = f" ({part.stat().st_size} of {remote.size} bytes in {part.name})" if part.is_file() else ""
            groups.setdefault((s, path.parent), []).append(path.name + extra)
        details = "; ".join(f"{s}: {', '.join(files)} in {folder}" for (s, folder), files in groups.items())
        lines.append(f"{name:<12} {worst:<8} {details}")
    return lines, complete


def main(argv: Sequence[str] | None = None, sources: Sources | None = None) -> int:
    """The ``odeformer-data`` command (``sources`` replaces the table of files, for tests)."""
    sources = SOURCES if sources is None else sources
    return run("odeformer-data", lambda: _main(argv, sources))


def _main(argv: Sequence[str] | None, sources: Sources) -> int:
    parser = Parser(
        prog="odeformer-data",
        description="Download the file-based datasets (verified by SHA-256) into the data root, or list them.",
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"datasets to fetch (default all: {', '.join(sources)})"
    )
    parser.add_argument("--root", help=f"data root (default ${ENV_VAR})")
    parser.add_argument("--list", action="store_true", help="say what is present, missing or corrupt, and where")
    parser.add_argument("--mirror", help=f"base URL with the data root's layout (default ${MIRROR_VAR} or the sources)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the server (default 30)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--force", action="store_true", help="replace files that are there with the wrong checksum")
    args = parser.parse_args(argv)
    names = select(args.names, sources)
    if args.list and not (args.root or os.environ.get(ENV_VAR)):
        print(f"no data root: nothing to list (pass --root DIR or set {ENV_VAR}; `odeformer-data` fills it).")
        return 0
    root = data_root(args.root)
    if not args.timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}.")
    if args.list:
        lines, complete = listing(root, names, sources)
        origin = "--root" if args.root else f"${ENV_VAR}"
        print(f"data root {root} (from {origin})")
        print("\n".join(lines))
        return 0  # a listing reports; what is missing is not a failure of the command
    try:
        fetch(root, names, args.mirror, sources, args.timeout, False if args.quiet else None, force=args.force)
    except FetchError as error:
        print(f"odeformer-data: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # the root cannot be written, the disk is full, ...
        print(f"odeformer-data: error: {one_line(error)}", file=sys.stderr)
        return 1
    if os.environ.get(ENV_VAR) != str(root):
        print(f"set {ENV_VAR}={root} for the loaders to find these files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
