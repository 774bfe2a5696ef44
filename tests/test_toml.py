"""The one TOML writer (boxmaker/_toml.py; issue 39 item 8): what it writes, tomllib reads back
as it was, for any string; DEL (U+007F), which TOML forbids raw, is escaped (the grants writer
left it raw); and brokerd's grants rules are written by it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker._toml import toml_array_item, toml_dumps, toml_string
from boxmaker.brokerd import grants
from boxmaker.brokerd.grants import Mode, Rule, parse_grants
from boxmaker.brokerd.tools.kind import GrantKind
from boxmaker.brokerd.tools.table import TABLE

TEXT = st.text(st.characters(exclude_categories=["Cs"]))  # any string UTF-8 can hold


@given(TEXT, TEXT)
def test_any_string_reads_back_as_written(key: str, value: str) -> None:
    doc = {key: value, "list": [value, 1, 2.5, True], "inline": {key: value}}
    assert tomllib.loads(toml_dumps({"s": doc}))["s"] == doc
    assert tomllib.loads(toml_array_item("grant", doc))["grant"] == [doc]


def test_del_and_controls_are_escaped() -> None:
    assert toml_string("a\x7fb") == '"a\\u007Fb"'
    assert toml_string('\x00\x1f\t\n"\\') == '"\\u0000\\u001F\\t\\n\\"\\\\"'
    assert toml_string("é ✓ 😀") == '"é ✓ 😀"'
    with pytest.raises(TypeError, match="lone surrogate"):
        toml_string("\ud800")
    assert toml_dumps({"p": Path("/x y")}) == 'p = "/x y"\n'


def test_a_grants_rule_with_del_in_a_name_round_trips() -> None:
    rule = Rule("write_file", Mode.ALLOW, GrantKind.PATHS, files=("a\x7fb.txt",))
    text = rule.to_toml()
    assert "\x7f" not in text
    assert parse_grants(text.encode(), TABLE) == (rule,)


def test_brokerd_writes_grants_with_the_one_writer() -> None:
    source = (
        Path(grants.__file__).read_text() + Path(grants.__file__).with_name("amend.py").read_text()
    )
    assert "toml_array_item" in source
    assert "orjson.dumps" not in source
