"""Hypothesis settings for the fuzz tests: a bounded run in `make test`, a long one in `make fuzz`.

    @fuzz_settings()
    @given(...)
    def test_...(...)

`FUZZ_EXAMPLES` (an int) sets every fuzz test's example count; unset, each runs DEFAULT_EXAMPLES,
which keeps a fuzz module to a few seconds on a loaded 2-core machine. `make fuzz` sets it to
200,000. The invariant is the same either way, so a long run only looks harder.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

DEFAULT_EXAMPLES = 200
ENV = "FUZZ_EXAMPLES"


def examples(default: int = DEFAULT_EXAMPLES) -> int:
    raw = os.environ.get(ENV, "").strip()
    return int(raw) if raw else default


def fuzz_settings(default: int = DEFAULT_EXAMPLES) -> settings:
    return settings(
        max_examples=examples(default),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def token_stream(tokens: list[bytes], max_tokens: int = 40) -> st.SearchStrategy[bytes]:
    """Bytes built from the grammar's pieces and a little noise: random bytes alone seldom get
    past a parser's first check, pieces of the real syntax reach its deeper states."""
    piece = st.sampled_from(tokens) | st.binary(min_size=1, max_size=8)
    return st.lists(piece, max_size=max_tokens).map(b"".join)


def cuts_of(data: st.DataObject, payload: bytes) -> list[int]:
    return data.draw(st.lists(st.integers(0, len(payload)), max_size=16), label="cuts")
