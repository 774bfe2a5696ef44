"""loopd's own tools without brokerd, and `[tools] core` (issue 28.4, 28.5): without a broker
socket loopd offers `clock` alone, answered by itself (LoopdClock), and says so; `echo` and
FakeTools are test code only. `core` picks the registry tools a new session's baseline offers
directly; the default is the brief's three schemas exactly.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from boxmaker.loopd.config import ToolsConfig
from boxmaker.loopd.tools.port import (
    LoopdClock,
    baseline_tools,
    broker_registry,
    tool_port,
    tools_line,
)
from boxmaker.loopd.tools.registry import (
    CALL_TOOL,
    CLOCK_SCHEMA,
    CORE_SCHEMAS,
    FIND_TOOL,
    RECALL_SCHEMA,
    Dispatch,
    core_schemas,
    folded_tools,
    resolve,
)
from boxmaker.proto import ToolCall, ToolRequest, ToolSchema, is_time

READ = ToolSchema("read_file", "Reads a file.", {"type": "object", "properties": {}})
LIST = ToolSchema("list_dir", "Lists a folder.", {"type": "object", "properties": {}})


def test_loopd_answers_clock_and_nothing_else() -> None:
    port = LoopdClock()
    stamp, weekday = port.call(ToolRequest(0, "clock", "{}")).content.split(", a ")
    assert is_time(stamp)  # brokerd's answer: the time, then its weekday (proto.clock_text)
    assert re.fullmatch(r"[A-Z][a-z]+day", weekday), weekday
    for tool in ("echo", "read_file", "shell", "Clock", "clock "):
        with pytest.raises(ValueError, match="without brokerd"):
            port.call(ToolRequest(0, tool, '{"text": "x"}'))


def test_without_a_broker_socket_only_clock_is_offered_and_the_start_line_says_so() -> None:
    config = ToolsConfig()
    got = tool_port(config, lambda *_: None)
    assert isinstance(got["port"], LoopdClock)
    registry = got["registry"]
    assert [t.schema.name for t in registry.tools] == ["clock", "recall"]
    assert registry.search("") == (registry.get("recall").schema,)
    echo = resolve(ToolCall("c1", CALL_TOOL, '{"name": "echo", "arguments": {"text": "hi"}}'),
                   registry)  # fmt: skip
    assert not isinstance(echo, Dispatch)
    assert "no other tool is reachable" in tools_line(config)
    assert baseline_tools(config) == CORE_SCHEMAS


def test_the_default_core_is_the_briefs_three() -> None:
    assert ToolsConfig().core == ("clock",)
    assert core_schemas(["clock"], [CLOCK_SCHEMA, READ]) == CORE_SCHEMAS


@pytest.mark.parametrize(
    ("core", "names"),
    [
        (["clock", "read_file"], ["clock", "read_file"]),
        (["read_file", "clock"], ["read_file", "clock"]),  # the config's order
        (["list_dir", "read_file", "clock"], ["list_dir", "read_file", "clock"]),
        (["clock", "write_file"], ["clock"]),  # not granted: left out
        ([], []),
        (["find_tool", "call_tool", "clock"], ["clock"]),  # loopd's own are always last
    ],
)
def test_core_schemas_follow_the_config(core: list[str], names: list[str]) -> None:
    shell = ToolSchema("shell", "Runs a command.", {"type": "object"})  # granted, never core here
    got = [s.name for s in core_schemas(core, [CLOCK_SCHEMA, READ, LIST, shell])]
    assert got == [*names, FIND_TOOL, CALL_TOOL]


def test_a_core_broker_tool_is_called_directly_and_call_tool_refuses_it() -> None:
    registry = broker_registry([CLOCK_SCHEMA, READ, LIST], core=("clock", "read_file"))
    assert isinstance(resolve(ToolCall("a", "read_file", "{}"), registry), Dispatch)
    via = resolve(ToolCall("b", CALL_TOOL, '{"name": "read_file", "arguments": {}}'), registry)
    assert not isinstance(via, Dispatch)
    assert "core tool; call it directly" in via.content
    assert [s.name for s in registry.search("")] == ["list_dir", "recall"]
    direct = resolve(ToolCall("c", "list_dir", "{}"), registry)
    assert not isinstance(direct, Dispatch)  # not core: through call_tool, as before


def test_brokerd_down_leaves_only_clock_in_a_new_baseline(tmp_path: Path) -> None:
    config = ToolsConfig(broker_socket=tmp_path / "broker.sock", core=("clock", "read_file"))
    assert [s.name for s in baseline_tools(config)] == ["clock", FIND_TOOL, CALL_TOOL]
    assert "core clock, read_file" in tools_line(config)


def test_find_tool_and_call_tool_are_left_out_when_every_tool_is_core() -> None:
    """Issue 40: in the qwen-coder profile find_tool reached only recall, and the model called it
    instead of the tool it needed."""
    known = [CLOCK_SCHEMA, READ, LIST]
    every = ["read_file", "list_dir", "clock"]
    assert [s.name for s in core_schemas(every, known)] == every
    assert [s.name for s in core_schemas(every, [*known, RECALL_SCHEMA])] == every
    # One tool behind them (a tool brokerd grants beyond the list): both are offered.
    got = [s.name for s in core_schemas(["read_file", "clock"], known)]
    assert got == ["read_file", "clock", FIND_TOOL, CALL_TOOL]
    # What brokerd grants is not known (it is down): both are offered.
    got = [s.name for s in core_schemas(every, known, complete=False)]
    assert got == [*every, FIND_TOOL, CALL_TOOL]


def test_recall_joins_the_tools_array_after_a_fold_only_where_nothing_reaches_it() -> None:
    bare = (CLOCK_SCHEMA, READ)
    assert folded_tools(bare) == (CLOCK_SCHEMA, READ, RECALL_SCHEMA)
    assert folded_tools(folded_tools(bare)) == (CLOCK_SCHEMA, READ, RECALL_SCHEMA)
    assert folded_tools(CORE_SCHEMAS) == CORE_SCHEMAS  # find_tool finds it


def test_with_every_tool_core_recall_is_called_directly_and_errors_name_only_the_tools() -> None:
    registry = broker_registry([READ, LIST], core=("clock", "read_file", "list_dir"))
    assert [s.name for s in registry.search("")] == ["recall"]
    recall = resolve(ToolCall("r", "recall", '{"epoch": 0, "seq": 1}'), registry)
    assert isinstance(recall, Dispatch)
    miss = resolve(ToolCall("m", "cat", "{}"), registry)
    assert not isinstance(miss, Dispatch)
    assert miss.content == (
        'error: there is no tool named "cat". The tools are clock, read_file, list_dir.'
    )
