"""proto.hash against the brief's vectors.

The expected digests were computed once by independent implementations (coreutils `sha256sum`,
and `openssl dgst -sha256` for the million-`a` message) and are pinned here as text: the test
never asks hashlib what the answer should be.
"""

import pytest

from boxmaker.proto.hash import DIGEST_BYTES, Sha256, sha256, sha256_hex

VECTORS: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    "abc": (b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    # 55, 56, 63, 64, 65 bytes straddle the padding boundaries: 55 is the longest message whose
    # length fits in one block, 56 needs a second block, 64 is exactly one block.
    "a*55": (b"a" * 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"),
    "a*56": (b"a" * 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"),
    "a*63": (b"a" * 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"),
    "a*64": (b"a" * 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"),
    "a*65": (b"a" * 65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"),
    "a*1000000": (
        b"a" * 1_000_000,
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
    ),
}

SHORT = [k for k, (msg, _) in VECTORS.items() if len(msg) <= 65]


@pytest.mark.parametrize("name", list(VECTORS))
def test_one_shot_digest_matches_the_vector(name: str) -> None:
    msg, hexdigest = VECTORS[name]
    assert sha256(msg) == bytes.fromhex(hexdigest)
    assert len(sha256(msg)) == DIGEST_BYTES
    assert sha256_hex(msg) == hexdigest


@pytest.mark.parametrize("name", SHORT)
def test_two_pieces_at_every_split_point_give_the_same_digest(name: str) -> None:
    msg, hexdigest = VECTORS[name]
    for cut in range(len(msg) + 1):
        h = Sha256()
        h.update(msg[:cut])
        h.update(msg[cut:])
        assert h.hexdigest() == hexdigest, f"split at {cut}"
        assert h.digest() == bytes.fromhex(hexdigest)


@pytest.mark.parametrize("cut", [0, 1, 55, 56, 63, 64, 65, 500_000, 999_999, 1_000_000])
def test_million_a_in_two_pieces(cut: int) -> None:
    msg, hexdigest = VECTORS["a*1000000"]
    h = Sha256(msg[:cut])
    h.update(memoryview(msg)[cut:])
    assert h.hexdigest() == hexdigest


def test_million_a_in_uneven_pieces_of_every_kind_of_buffer() -> None:
    msg, hexdigest = VECTORS["a*1000000"]
    h = Sha256()
    pos = 0
    sizes = [1, 63, 64, 65, 4096, 1, 55, 56]
    i = 0
    while pos < len(msg):
        piece = msg[pos : pos + sizes[i % len(sizes)]]
        h.update(bytearray(piece) if i % 2 else piece)
        pos += len(piece)
        i += 1
    assert h.hexdigest() == hexdigest


def test_digest_does_not_end_the_stream() -> None:
    h = Sha256(b"a")
    assert h.hexdigest() == sha256_hex(b"a")
    h.update(b"bc")
    assert h.hexdigest() == VECTORS["abc"][1]
