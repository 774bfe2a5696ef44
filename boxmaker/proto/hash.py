"""SHA-256, the one hash Boxmaker uses (baseline files, the log's prev chain, /props templates).

The briefs name `proto::sha256` over the owner's `emsha` crate; DECISIONS.md puts hashlib behind
the same name. The brief's test vectors stay in tests/proto/test_hash.py.
"""

import hashlib

# collections.abc.Buffer is 3.12+; these are the buffers hashlib takes that callers pass.
BytesLike = bytes | bytearray | memoryview

DIGEST_BYTES = 32


def sha256(data: BytesLike) -> bytes:
    """The 32-byte SHA-256 digest of `data`."""
    return hashlib.sha256(data).digest()


def sha256_hex(data: BytesLike) -> str:
    """The SHA-256 digest of `data` as 64 lowercase hex digits (the form logs and configs hold)."""
    return hashlib.sha256(data).hexdigest()


class Sha256:
    """Streaming SHA-256: feed pieces with `update`, read the digest at any point."""

    __slots__ = ("_h",)

    def __init__(self, data: BytesLike = b"") -> None:
        self._h = hashlib.sha256(data)

    def update(self, data: BytesLike) -> None:
        self._h.update(data)

    def digest(self) -> bytes:
        return self._h.digest()

    def hexdigest(self) -> str:
        return self._h.hexdigest()
