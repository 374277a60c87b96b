"""The published data files: where each comes from, pinned to one commit, with its size and SHA-256 (``SOURCES``).

``odeformer-data`` (:mod:`odeformer.app.commands.data`) downloads them and checks each against these; the loaders read
them (and warn when a file on disk differs from the published one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Remote:
    """One file: its ``path`` under the data root, canonical ``url``, SHA-256 (hex) and size in bytes."""

    path: str
    url: str
    sha256: str
    size: int


def _raw(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


_PLANETOID = ("kimiyoung/planetoid", "af6abf468a772cc055bec88c52e4d6f51b7c37e3")
_CHAR_RNN = ("karpathy/char-rnn", "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e")
_ALPS = ("forest-snow/alps", "3c7ef2c98249fc975a897b27f275695f97d5b7a9")

SOURCES: dict[str, tuple[Remote, ...]] = {
    "cora": tuple(
        Remote(f"planetoid/ind.cora.{part}", _raw(*_PLANETOID, f"data/ind.cora.{part}"), sha, size)
        for part, sha, size in (
            ("x", "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab", 22119),
            ("y", "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1", 4054),
            ("tx", "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a", 148025),
            ("ty", "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad", 28135),
            ("allx", "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543", 257305),
            ("ally", "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71", 47959),
            ("graph", "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d", 59847),
            ("test.index", "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875", 5000),
        )
    ),
    "shakespeare": (
        Remote(
            "text/tinyshakespeare.txt",
            _raw(*_CHAR_RNN, "data/tinyshakespeare/input.txt"),
            "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            1115394,
        ),
    ),
    "sst2": tuple(
        Remote(f"sst2/{name}", _raw(*_ALPS, f"data/SST-2/{name}"), sha, size)
        for name, sha, size in (
            ("train.tsv", "920e317b2c52e12cd22db1da2c6708312bd7dc4f3712b9bbf1b50ee6c2c792ba", 3422882),
            ("dev.tsv", "92353770071a2a889f75d000a38a9e541ea8f0a5499e50f040b17917a5cbf66f", 383214),
            ("test.tsv", "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0", 94931),
        )
    ),
}

Sources = Mapping[str, Sequence[Remote]]
