"""A hash-chained log rotated into files (brokerd's decision log, brokerd/log.py): where its
files are and their bytes as one chain, what `brokerd verify` and `bxctl verify-broker` read.
The chain check itself is chain.py's, the one both verifiers and brokerd's open use."""

from __future__ import annotations

import contextlib
import os
import re


def archives(path: str) -> list[str]:
    """The rotated files of the log at `path`, oldest first (`<log>.1`, `<log>.2`, ...)."""
    folder, name = os.path.split(path)
    pattern = re.compile(re.escape(name) + r"\.([1-9][0-9]*)")
    entries: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        entries = os.listdir(folder or ".")
    found = [(int(m.group(1)), e) for e in entries if (m := pattern.fullmatch(e))]
    return [os.path.join(folder, e) for _, e in sorted(found)]


def read_chain(path: str) -> bytes:
    """Every file of the log, oldest first, as one chain (what the verifiers check and replay).
    The current file may be missing when the last step of a rotation did not happen."""
    parts = []
    for name in archives(path):
        with open(name, "rb") as f:
            parts.append(f.read())
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
        parts.append(f.read())
    return b"".join(parts)
