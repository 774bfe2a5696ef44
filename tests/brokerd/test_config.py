"""brokerd's config: strict, bounded, paths from the config's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from boxmaker.brokerd.cli import main
from boxmaker.brokerd.config import ConfigError, parse_config
from boxmaker.brokerd.tools.table import TABLE
from tests.support.cli import run_cli

GOOD = b"""[broker]
socket = "run/broker.sock"
owner_socket = "run/owner.sock"
workspace = "ws"
grants = "grants.toml"
home = "home"
log = "state/decisions.jsonl"
"""


def test_paths_are_taken_from_the_configs_folder() -> None:
    config = parse_config(GOOD, "/etc/boxmaker")
    assert config.socket == "/etc/boxmaker/run/broker.sock"
    assert config.approval_timeout_ms == 120_000
    assert config.loopd_uid is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (b"approval_timeout_ms = 0\n", "broker.approval_timeout_ms must be an integer from 1 to"),
        (b"approval_timeout_ms = true\n", "approval_timeout_ms"),
        (b"result_cap_bytes = 10\n", "result_cap_bytes"),
        (b"loopd_uid = -1\n", "loopd_uid"),
        (b"timeout = 3\n", "unknown key broker.timeout; known here: socket"),
        (b"[loop]\n", "unknown section [loop]; known here: broker, mcp"),
        (b'owner_socket = "run/broker.sock"\n', "two different paths"),
    ],
)
def test_bad_values_are_refused_with_the_key(extra: bytes, message: str) -> None:
    text = GOOD.replace(b'owner_socket = "run/owner.sock"\n', b"") if b"owner_socket" in extra \
        else GOOD  # fmt: skip
    with pytest.raises(ConfigError) as info:
        parse_config(text + extra, "/x")
    assert message in str(info.value)


def test_a_missing_key_and_a_long_socket_path() -> None:
    with pytest.raises(ConfigError, match=r"missing required keys: broker\.owner_socket"):
        parse_config(b'[broker]\nsocket = "a"\n', "/x")
    with pytest.raises(ConfigError, match="at most 107"):
        parse_config(GOOD, "/" + "d" * 120)


def test_serve_with_a_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "b.toml").write_bytes(GOOD + b"bogus = 1\n")
    out = run_cli(main, ["serve", "--config", tmp_path / "b.toml"])
    assert out.status == 2
    assert "unknown key broker.bogus" in out.stderr


def test_the_examples_parse() -> None:
    from boxmaker.brokerd.grants import Mode
    from tests.support.brokerd.core import decision, parse_grants

    conf = Path(__file__).resolve().parents[2] / "conf"
    config = parse_config((conf / "brokerd.toml.example").read_bytes(), str(conf), TABLE.sections())
    assert config.approval_timeout_ms == 120_000
    rules = parse_grants((conf / "grants.toml.example").read_bytes())
    assert decision(rules, "read_file", ("secrets", "k")).mode is Mode.DENY
    assert decision(rules, "write_file", ("notes", "a")).mode is Mode.ALLOW
    assert decision(rules, "write_file", ("src", "a")).mode is Mode.ASK
    assert decision(rules, "note", "core").mode is Mode.ASK


@pytest.mark.parametrize(
    ("breakage", "says"),
    [("grants", "grant 1: mode must be"), ("workspace", "No such file"), ("log", "line 1")],
)
def test_serve_refuses_to_start_on_bad_grants_workspace_or_log(
    tmp_path: Path, breakage: str, says: str
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "grants.toml").write_text('[[grant]]\ntool = "read_file"\nmode = "allow"\n')
    (tmp_path / "state").mkdir()
    if breakage == "grants":
        (tmp_path / "grants.toml").write_text('[[grant]]\ntool = "read_file"\nmode = "yes"\n')
    elif breakage == "workspace":
        (tmp_path / "ws").rmdir()
    else:
        (tmp_path / "state" / "decisions.jsonl").write_text('{"type":"start"}\n')
    config = GOOD.replace(b'"run/', b'"/tmp/bk-cfg-' + tmp_path.name[-6:].encode() + b"/")
    (tmp_path / "b.toml").write_bytes(config)
    out = run_cli(main, ["serve", "--config", tmp_path / "b.toml"])
    assert out.status == 1
    assert says in out.stderr
