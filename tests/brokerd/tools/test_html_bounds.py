"""Issue 37 class 1's audit, the HTML-to-text in fetch: html.parser is super-linear on some
markup (in `feed` and in `close`), so a page of 2 MiB (fetch's cap) could hold brokerd's thread
and a core for minutes. The conversion stops at its deadline, or at an unclosed construct past
MAX_PENDING, and the text says what was not read."""

from __future__ import annotations

import time

import pytest

from boxmaker.brokerd.tools.htmltext import html_to_text

SIZE = 2 << 20  # fetch's default max_bytes
BUDGET_S = 2.0
SLOW = ["<!--", "<a ", "<a x='", "<![CDATA[", "<?", "<!x", "</a ", "<a\t" * 3 + "b="]


@pytest.mark.parametrize("unit", SLOW)
def test_hostile_markup_is_turned_into_text_within_its_budget(unit: str) -> None:
    body = "<p>before-71c3</p>" + (unit * (SIZE // len(unit) + 1))[:SIZE]
    started = time.monotonic()
    text = html_to_text(body, lambda: time.monotonic() > started + BUDGET_S)
    took = time.monotonic() - started
    assert took < BUDGET_S * 3, (unit, took)
    assert "before-71c3" in text
    assert "was not read" in text


def test_an_ordinary_page_is_read_whole() -> None:
    body = "<html><body>" + "<p>line <a href='http://x/'>x</a></p>" * 2000 + "<p>end-5d</p>"
    text = html_to_text(body, lambda: False)
    assert text.endswith("end-5d")
    assert "was not read" not in text
