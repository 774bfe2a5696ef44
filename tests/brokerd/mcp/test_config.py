"""`[mcp.<name>]`: strict, bounded, each error naming the file and the dotted key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from boxmaker.brokerd.config import ConfigError, parse_config
from boxmaker.brokerd.mcp.config import LIMITS, parse_mcp
from boxmaker.brokerd.mcp.hosts import HostEntry
from boxmaker.brokerd.tools.table import TABLE

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


TRUSTED_WORKSPACE = "mcp.s.trusted cannot be true for a server that sees the workspace"
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
    ("[mcp.s]\nargs = []\n", "missing required key: mcp.s.command (the server's program)"),
    ('[mcp.s]\ncommand = ""\n', "mcp.s.command must be a non-empty string"),
    (
        '[mcp.s]\ncommand = "x"\nshell = true\n',
        "unknown key mcp.s.shell; known here: command, args",
    ),
    (
        '[mcp.s]\ncommand = "x"\nargs = "a b"\n',
        "mcp.s.args must be a list of at most 256 arguments",
    ),
    (
        '[mcp.s]\ncommand = "x"\nargs = [1]\n',
        "mcp.s.args must be a list of at most 256 arguments, each a non-empty string",
    ),
    (
        '[mcp.s]\ncommand = "x"\nworkspace = "RW"\n',
        'mcp.s.workspace must be one of "none", "ro", "rw", got "RW"',
    ),
    ('[mcp.s]\ncommand = "x"\nworkspace = true\n', "mcp.s.workspace must be one of"),
    (
        '[mcp.s]\ncommand = "x"\ncwd = "repo"\n',
        "mcp.s.cwd must be an absolute path inside the sandbox",
    ),
    ('[mcp.s]\ncommand = "x"\nro_paths = ["/"]\n', "mcp.s.ro_paths must be a list of paths"),
    (
        '[mcp.s]\ncommand = "x"\nro_paths = ["/proc/1"]\n',
        "got /proc/1, which would cover the sandbox's own mounts",
    ),
    ('[mcp.s]\ncommand = "x"\nro_paths = ["/tmp"]\n', "got /tmp, which would cover"),
    (
        '[mcp.s]\ncommand = "x"\nro_paths = ["/workspace/a"]\n',
        "got /workspace/a, which would cover",
    ),
    (
        '[mcp.s]\ncommand = "x"\nenv = { HTTP_PROXY = "x" }\n',
        'mcp.s.env must be a table of NAME = "value"',
    ),
    (
        '[mcp.s]\ncommand = "x"\nenv = { https_proxy = "x" }\n',
        "got https_proxy, which is brokerd's (the egress proxy); use hosts",
    ),
    ('[mcp.s]\ncommand = "x"\nenv = { "A-B" = "x" }\n', 'got "A-B", which is not a variable name'),
    (
        '[mcp.s]\ncommand = "x"\nenv = { A = 1 }\n',
        'mcp.s.env must be a table of NAME = "value" (values without NUL',
    ),
    ('[mcp.s]\ncommand = "x"\ntrusted = "yes"\n', "mcp.s.trusted must be true or false"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["a b"]\n', "mcp.s.hosts must be a list of hosts"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["::1"]\n', "got '::1': write an IPv6"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["h:0"]\n', "got 'h:0': the port"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["h:99999"]\n', "got 'h:99999': the port must be"),
    ('[mcp.s]\ncommand = "x"\nhosts = ["127.1"]\n', "four numbers"),
    (
        '[mcp.s]\ncommand = "x"\nhosts = "h"\n',
        "mcp.s.hosts must be a list of hosts (name, name:port, a.b.c.d[:port], [IPv6][:port]), "
        "got string",
    ),
    (
        '[mcp.s]\ncommand = "x"\ncall_timeout_ms = 5\n',
        "mcp.s.call_timeout_ms must be an integer from 100 to",
    ),
    (
        '[mcp.s]\ncommand = "x"\nresult_cap_bytes = 1.5\n',
        "mcp.s.result_cap_bytes must be an integer",
    ),
    ('[mcp.s]\ncommand = "x"\nprocesses = true\n', "mcp.s.processes must be an integer"),
    (
        '[mcp.s]\ncommand = "x"\nmemory_bytes = 1\n',
        "mcp.s.memory_bytes must be an integer from 67108864",
    ),
    (
        '[mcp.s]\ncommand = "x"\nrestart_backoff_ms = 900\nrestart_backoff_max_ms = 800\n',
        "mcp.s.restart_backoff_max_ms must be at least restart_backoff_ms",
    ),
    ("mcp = 3\n", "mcp must be a table of [mcp.<name>] tables"),
    ("[mcp]\ns = 3\n", "mcp.s must be a table ([mcp.s])"),
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
    config = parse_config(text.encode() + b"\n" + uncommented.encode(), str(conf), TABLE.sections())
    servers = parse_mcp(config.mcp, str(conf))
    assert sorted(servers) == ["git", "time", "web"]
    assert servers["git"].workspace == "ro"
    assert [str(h) for h in servers["web"].hosts] == ["docs.python.org"]
