"""h11-style feeding helpers for the batch decoders in boxmaker._fast.

A decoder here is anything with `feed(data) -> output`. Each helper feeds one input in a different
way and returns what came out, so a test can check that the way the input was cut changes nothing.
"""

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

Feed = Callable[[bytes], Any]


def pieces_at(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    """Splits `data` at the given offsets (any order, duplicates and ends allowed)."""
    points = sorted({0, len(data), *(min(max(c, 0), len(data)) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def feed_pieces(feed: Feed, pieces: Sequence[bytes]) -> list[Any]:
    """Feeds each piece in order; returns the outputs of every call."""
    return [feed(p) for p in pieces]


def feed_whole(feed: Feed, data: bytes) -> list[Any]:
    return feed_pieces(feed, [data])


def feed_bytewise(feed: Feed, data: bytes) -> list[Any]:
    return feed_pieces(feed, [data[i : i + 1] for i in range(len(data))])


def feed_cuts(feed: Feed, data: bytes, cuts: Iterable[int]) -> list[Any]:
    return feed_pieces(feed, pieces_at(data, cuts))


# The ways every hand-written case is fed: whole, byte by byte, and at a few fixed cut points.
FEED_MODES: dict[str, Callable[[Feed, bytes], list[Any]]] = {
    "whole": feed_whole,
    "bytewise": feed_bytewise,
    "thirds": lambda feed, data: feed_cuts(feed, data, [len(data) // 3, 2 * len(data) // 3]),
}
