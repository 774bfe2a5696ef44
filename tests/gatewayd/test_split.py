"""The answer splitter (M4 section 7): whole, in order, each part under the post size, cut at
paragraphs, then lines, then spaces, never leaving a code fence open."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.gatewayd.split import MIN_LIMIT, RESERVE, split_answer

WHERE = "`bxctl history mm.x`"
NUM = re.compile(r"^\((\d+)/(\d+)\)\n")


def strip(parts: list[str]) -> list[str]:
    return [NUM.sub("", p) for p in parts]


def test_a_short_answer_is_one_unnumbered_post() -> None:
    assert split_answer("hello\n\nworld", 16383, 5, WHERE) == ["hello\n\nworld"]


def test_paragraphs_are_the_first_boundary_and_parts_are_numbered() -> None:
    para = "word " * 100  # 500 characters
    text = "\n\n".join([para.strip()] * 6)
    parts = split_answer(text, 1500, 10, WHERE)
    assert len(parts) > 1
    assert all(len(p) <= 1500 for p in parts)
    n = len(parts)
    assert [NUM.match(p).groups() for p in parts] == [(str(i), str(n)) for i in range(1, n + 1)]  # type: ignore[union-attr]
    for body in strip(parts):
        assert not body.startswith("\n")
        assert all(chunk == para.strip() for chunk in body.split("\n\n"))


def test_a_long_paragraph_is_cut_at_lines_then_spaces() -> None:
    lines = "\n".join(f"line {i} " + "x" * 80 for i in range(100))
    parts = strip(split_answer(lines, 1000, 50, WHERE))
    assert "\n".join(parts).split("\n") == lines.split("\n")
    one = "word " * 1000
    cut = strip(split_answer(one, 1000, 50, WHERE))
    assert all(len(p) <= 1000 - RESERVE for p in cut)
    assert " ".join(cut).split() == one.split()


def test_a_fence_cut_in_two_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"print({i})" for i in range(300))
    text = f"Here:\n\n```python\n{code}\n```\n\nDone."
    parts = strip(split_answer(text, 1000, 50, WHERE))
    assert len(parts) > 2
    for p in parts:
        assert p.count("```") % 2 == 0, f"a fence left open: {p[:60]!r}"
    inner = [p for p in parts if "print(" in p]
    assert all(p.startswith("```python\n") or "\n```python\n" in p for p in inner)
    got = [ln for p in parts for ln in p.split("\n") if ln.startswith("print(")]
    assert got == code.split("\n")


def test_past_max_reply_posts_the_rest_is_cut_with_a_note() -> None:
    text = "\n\n".join("p" * 400 for _ in range(40))
    parts = split_answer(text, 1000, 3, WHERE)
    assert len(parts) == 3
    assert parts[-1].startswith("(3/3)")
    assert "[cut:" in parts[-1]
    assert WHERE in parts[-1]
    assert all(len(p) <= 1000 for p in parts)


def test_an_unclosed_fence_is_closed() -> None:
    parts = split_answer("```\n" + "a\n" * 2000, 1000, 50, WHERE)
    assert all(p.count("```") % 2 == 0 for p in parts)


@settings(max_examples=60, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("ab `~\n#é\u202e"), max_size=6000),
    st.integers(MIN_LIMIT, 3000),
)
def test_every_part_fits_and_nothing_is_lost(text: str, limit: int) -> None:
    parts = split_answer(text, limit, 1000, WHERE)
    assert all(len(p) <= limit for p in parts)
    joined = "".join(strip(parts))
    # every non-space character of the answer is posted, in order (fences may be added)
    kept = [c for c in text if not c.isspace() and c not in "`~"]
    got = iter(c for c in joined if not c.isspace() and c not in "`~")
    assert all(c in got for c in kept)
