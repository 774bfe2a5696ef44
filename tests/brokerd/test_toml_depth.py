"""Issue 37 class 1's audit: tomllib recurses per nested array or inline table, so a grants file
or a config nested deep raised RecursionError past the parsers' own error (brokerd stopped with
a traceback). Each is now one clear error."""

from __future__ import annotations

import pytest

from boxmaker.brokerd.config import ConfigError, parse_config
from boxmaker.brokerd.grants import GrantsError
from tests.support.brokerd.core import parse_grants

DEEP = [
    "x = " + "[" * 3000 + "]" * 3000,
    "x = " + "{a = " * 3000 + "1" + "}" * 3000,
    '[[grant]]\ntool = "read_file"\nmode = "allow"\npaths = ' + "[" * 3000 + "]" * 3000,
    "x = " + "[{a = " * 1500 + "1" + "}]" * 1500,
    "[broker]\nworkspace = " + "[" * 5000 + "]" * 5000,
]


@pytest.mark.parametrize("text", DEEP)
def test_a_grants_file_nested_too_deep_is_one_clear_error(text: str) -> None:
    with pytest.raises(GrantsError, match="nested too deep"):
        parse_grants(text.encode())


@pytest.mark.parametrize("text", DEEP)
def test_a_config_nested_too_deep_is_one_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match="nested too deep"):
        parse_config(text.encode(), "/etc/boxmaker")
