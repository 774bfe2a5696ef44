"""FakeTools, M2b's in-process tool port."""

from __future__ import annotations

import pytest

from boxmaker.loopd.tools.port import ToolPort, utc_now
from boxmaker.proto import ResultClass, ToolRequest, ToolResponse, is_time
from tests.support.fake_tools import FakeTools


def test_clock_answers_the_time_as_rfc3339() -> None:
    port: ToolPort = FakeTools()
    got = port.call(ToolRequest(0, "clock", "{}"))
    assert is_time(got.content)
    assert got == ToolResponse(got.content, ResultClass.PUBLIC, untrusted=False, truncated=False)


def test_clock_is_a_parameter() -> None:
    assert (
        FakeTools(clock=lambda: "2026-01-02T03:04:05.000Z")
        .call(ToolRequest(7, "clock", "{}"))
        .content
        == "2026-01-02T03:04:05.000Z"
    )


def test_echo_returns_its_text() -> None:
    got = FakeTools().call(ToolRequest(1, "echo", '{"text": "héllo\\n"}'))
    assert got == ToolResponse("héllo\n", ResultClass.PUBLIC, untrusted=False, truncated=False)


@pytest.mark.parametrize(
    ("tool", "arguments"), [("echo", "{}"), ("echo", '{"text": 1}'), ("rm", "{}")]
)
def test_fake_tools_raise_on_what_the_loop_never_sends(tool: str, arguments: str) -> None:
    with pytest.raises(ValueError, match=r"echo takes|has no tool"):
        FakeTools().call(ToolRequest(0, tool, arguments))


def test_utc_now_is_the_log_time_format() -> None:
    assert is_time(utc_now())
