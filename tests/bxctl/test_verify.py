"""bxctl verify, called in-process through main(argv, env) with string streams."""

import io
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from boxmaker._cli import Environment, ExitStatus
from boxmaker.bxctl.cli import main
from tests.support.session.session_cases import CONVERSATION, T0, make_session, t


@dataclass
class Run:
    status: ExitStatus
    out: str
    err: str


def bxctl(*argv: str) -> Run:
    """A tiny in-process runner (tests/support/cli.py will replace it)."""
    env = Environment(stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO())
    status = main(list(argv), env)
    return Run(status, env.stdout.getvalue(), env.stderr.getvalue())  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def no_home_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BOXMAKER_HOME", raising=False)


def test_a_good_session_prints_its_counts_and_exits_0(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    r = bxctl("verify", "s1", "--home", str(tmp_path))
    assert r.status == ExitStatus.OK
    assert r.err == ""
    assert r.out == (
        f"ok: session s1: 11 records, 2 turns, started {T0}, last activity {t(10)} ({log})\n"
    )


def test_json_output(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    r = bxctl("verify", "s1", "--home", str(tmp_path), "--json")
    assert r.status == ExitStatus.OK
    assert orjson.loads(r.out) == {
        "ok": True,
        "session": "s1",
        "log": str(log),
        "records": len(CONVERSATION) + 1,
        "turns": 2,
        "started": T0,
        "last_activity": t(10),
        "error": None,
    }


def test_a_tampered_log_prints_the_file_and_line_and_exits_1(tmp_path: Path) -> None:
    log = make_session(tmp_path)
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([*lines[:3], *lines[4:]]))
    r = bxctl("verify", "s1", "--home", str(tmp_path))
    assert r.status == ExitStatus.ERROR
    assert r.out == f"FAILED: session s1: {log}: line 4: seq is 4, expected 3 " + (
        "(a line is missing, repeated or out of order)\n"
    )
    j = orjson.loads(bxctl("verify", "s1", "--home", str(tmp_path), "--json").out)
    assert j["ok"] is False
    assert j["error"].startswith(f"{log}: line 4: ")


def test_a_missing_session_exits_1(tmp_path: Path) -> None:
    r = bxctl("verify", "nope", "--home", str(tmp_path))
    assert r.status == ExitStatus.ERROR
    assert r.out.startswith("FAILED: session nope: no such session")


def test_a_bad_id_is_a_usage_error(tmp_path: Path) -> None:
    r = bxctl("verify", "../x", "--home", str(tmp_path))
    assert r.status == ExitStatus.USAGE
    assert r.out == ""
    assert r.err.startswith("bxctl verify: session id '../x' is refused")
    assert not (tmp_path / "sessions").exists()


def test_the_home_comes_from_the_environment_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_session(tmp_path / "a")
    monkeypatch.setenv("BOXMAKER_HOME", str(tmp_path / "a"))
    assert bxctl("verify", "s1").status == ExitStatus.OK
    # --home wins over the environment.
    r = bxctl("verify", "s1", "--home", str(tmp_path / "b"))
    assert r.status == ExitStatus.ERROR
    assert str(tmp_path / "b" / "sessions" / "s1") in r.out
    monkeypatch.delenv("BOXMAKER_HOME")
    r = bxctl("verify", "s1")
    assert "/var/lib/boxmaker/sessions/s1" in r.out


def test_usage_errors_and_help_go_to_the_streams() -> None:
    r = bxctl()
    assert r.status == ExitStatus.USAGE
    assert "usage: bxctl" in r.err
    r = bxctl("verify")
    assert r.status == ExitStatus.USAGE
    assert "the following arguments are required: session" in r.err
    r = bxctl("verify", "--help")
    assert r.status == ExitStatus.OK
    assert "--home" in r.out
    assert r.err == ""


def test_python_dash_m_runs_it(tmp_path: Path) -> None:
    make_session(tmp_path)
    argv = [sys.executable, "-m", "boxmaker.bxctl", "verify", "s1", "--home", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: session s1: 11 records")


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "bxctl"
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "verify" in done.stdout


def test_bxctl_imports_no_daemon_code() -> None:
    code = (
        "import sys, boxmaker.bxctl.cli; "
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('boxmaker'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = done.stdout.split()
    allowed = (
        "boxmaker.proto",
        "boxmaker._cli",
        "boxmaker._defaults",
        "boxmaker._framed",  # the owner.sock client
        "boxmaker._crashpoint",  # the session store's test-only crash hook (stdlib only)
        "boxmaker._pid",  # whether brokerd's pid is alive (the tools line)
        "boxmaker.session",
        "boxmaker.bxctl",
    )
    parents = {"boxmaker"}
    outside = [m for m in loaded if m not in parents and not m.startswith(allowed)]
    assert outside == []
    assert "boxmaker.session.verify" in loaded
