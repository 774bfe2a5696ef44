"""`[mcp.<name>]`: strict, bounded, each error naming the table and the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from boxmaker.brokerd.config import ConfigError, parse_config
from boxmaker.brokerd.mcp.config import LIMITS, parse_mcp
from boxmaker.brokerd.mcp.hosts import HostEntry

GOOD = """
[mcp.time]
command = "/usr/bin/python3"
args = ["-m", "mcp_server_time"]
env = { PYTHONPATH = "/opt/site" }
ro_paths = ["site", "/opt/site"]

[mcp.git]
command = "mcp-server-git"
workspace = "ro"
cwd = "/workspace/repo/"

[mcp.web]
command = "mcp-server-fetch"
hosts = ["Example.COM", "127.0.0.1:8080", "[::1]:9"]
trusted = true
call_timeout_ms = 5000
"""


def parse(text: str) -> dict:  # type: ignore[type-arg]
    return parse_mcp(tomllib.loads(text).get("mcp", {}), "/etc/boxmaker")


def test_a_good_config_is_read_whole() -> None:
    servers = parse(GOOD)
    time_ = servers["time"]
    assert time_.args == ("-m", "mcp_server_time")
    assert time_.ro_paths == ("/etc/boxmaker/site", "/opt/site")
    assert time_.workspace == "none"
    assert time_.hosts == ()
    assert time_.trusted is False
    assert time_.limit("call_timeout_ms") == LIMITS["call_timeout_ms"][2]
    assert servers["git"].cwd == "/workspace/repo"
    web = servers["web"]
    assert web.hosts == (
        HostEntry("example.com", (80, 443)),
        HostEntry("127.0.0.1", (8080,)),
        HostEntry("::1", (9,)),
    )
    assert web.trusted is True
    assert web.limit("call_timeout_ms") == 5000


def test_no_mcp_table_is_no_servers() -> None:
    assert parse("") == {}


TRUSTED_WORKSPACE = "[mcp.s] trusted: a server that sees the workspace"
BAD = [
    ('[mcp.s]\ncommand = "x"\nworkspace = "rw"\ntrusted = true\n', TRUSTED_WORKSPACE),
    ('[mcp.s]\ncommand = "x"\nworkspace = "ro"\ntrusted = true\n', TRUSTED_WORKSPACE),
    ('[mcp.s]\ntrusted = true\ncommand = "x"\nworkspace = "rw"\n', TRUSTED_WORKSPACE),
    (
        '[mcp.s]\ncommand = "x"\nworkspace = "rw"\ntrusted = true\nhosts = ["a.b"]\n',
        TRUSTED_WORKSPACE,
    ),
    ('[mcp.s]\ncommand = "x"\nworkspace = "ro"\ntrusted = true\ncwd = "/tmp"\n', TRUSTED_WORKSPACE),
    ('[mcp."a.b"]\ncommand = "x"\n', "[mcp.a.b]: a server name"),
    ('[mcp.1x]\ncommand = "x"\n', "[mcp.1x]: a server name"),
    ("[mcp.s]\nargs = []\n", "[mcp.s]: missing key command"),
    ('[mcp.s]\ncommand = ""\n', "[mcp.s] command: expected a non-empty string"),
    ('[mcp.s]\ncommand = "x"\nshell = true\n', "[mcp.s]: unknown key(s) shell"),
    ('[mcp.s]\ncommand = "x"\nargs = "a b"\n', "[mcp.s] args: expected a list"),
    ('[mcp.s]\ncommand = "x"\nargs = [1]\n', "[mcp.s] args: expected a non-empty string"),
    ('[mcp.s]\ncommand = "x"\nworkspace = "RW"\n', '[mcp.s] workspace: expected "none"'),
    ('[mcp.s]\ncommand = "x"\nworkspace = true\n', "[mcp.s] workspace"),
    ('[mcp.s]\ncommand = "x"\ncwd = "repo"\n', "[mcp.s] cwd: a path inside the sandbox"),
    ('[mcp.s]\ncommand = "x"\nro_paths = ["/"]\n', "[mcp.s] ro_paths: / would cover"),
    ('[mcp.s]\ncommand = "x"\nro_paths = ["/proc/1"]\n', "[mcp.s] ro_paths: /proc/1 would"),
    ('[mcp.s]\ncommand = "x"\nro_paths = ["/tmp"]\n', "[mcp.s] ro_paths: /tmp would"),
    ('[mcp.s]\ncommand = "x"\nro_paths = ["/workspace/a"]\n', "ro_paths: /workspace/a would"),
    ('[mcp.s]\ncommand = "x"\nenv = { HTTP_PROXY = "x" }\n', "[mcp.s] env: HTTP_PROXY is brokerd"),
    ('[mcp.s]\ncommand = "x"\nenv = { https_proxy = "x" }\n', "[mcp.s] env: https_proxy is"),
    ('[mcp.s]\ncommand = "x"\nenv = { "A-B" = "x" }\n', "[mcp.s] env: 'A-B' is not"),
    ('[mcp.s]\ncommand = "x"\nenv = { A = 1 }\n', "[mcp.s] env A: expected a string"),
    ('[mcp.s]\ncommand = "x"\ntrusted = "yes"\n', "[mcp.s] trusted: expected true or false"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["a b"]\n', "[mcp.s] hosts: 'a b'"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["::1"]\n', "[mcp.s] hosts: '::1': write an IPv6"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["h:0"]\n', "[mcp.s] hosts: 'h:0': the port"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["h:99999"]\n', "[mcp.s] hosts: 'h:99999'"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["127.1"]\n', "four numbers"),
    ('[mcp.s]\ncommand = "x"\nhosts = "h"\n', "[mcp.s] hosts: expected a list"),
    ('[mcp.s]\ncommand = "x"\ncall_timeout_ms = 5\n', "[mcp.s] call_timeout_ms: expected a whole"),
    ('[mcp.s]\ncommand = "x"\nresult_cap_bytes = 1.5\n', "[mcp.s] result_cap_bytes"),
    ('[mcp.s]\ncommand = "x"\nprocesses = true\n', "[mcp.s] processes"),
    ('[mcp.s]\ncommand = "x"\nmemory_bytes = 1\n', "[mcp.s] memory_bytes"),
    (
        '[mcp.s]\ncommand = "x"\nrestart_backoff_ms = 900\nrestart_backoff_max_ms = 800\n',
        "restart_backoff_max_ms: must be at least",
    ),
    ("mcp = 3\n", "[mcp]: expected a table"),
    ("[mcp]\ns = 3\n", "[mcp.s]: expected a table"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_value_is_refused_naming_its_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_mcp(tomllib.loads(text).get("mcp"), "/etc")
    assert message in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_the_examples_commented_in_brokerd_toml_example_parse() -> None:
    """conf/brokerd.toml.example's [mcp.*] tables, uncommented, are a config brokerd takes."""
    conf = Path(__file__).resolve().parents[3] / "conf"
    text = (conf / "brokerd.toml.example").read_text()
    lines = text[text.index("# MCP servers") :].splitlines()
    uncommented = "\n".join(line[1:] for line in lines if line[:2] not in ("# ", "#"))
    config = parse_config(text.encode() + b"\n" + uncommented.encode(), str(conf))
    servers = parse_mcp(config.mcp, str(conf))
    assert sorted(servers) == ["git", "time", "web"]
    assert servers["git"].workspace == "ro"
    assert [str(h) for h in servers["web"].hosts] == ["docs.python.org"]
