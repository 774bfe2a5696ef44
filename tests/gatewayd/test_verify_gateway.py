"""`make verify-device GATEWAY=gateway.toml GATEWAY_ONLY=1` (boxmaker/verify/gateway.py) against the
fake Mattermost, as a real process: all PASS on a good setup, and each failure one FAIL line that
says what to fix (a refused token, a token that is not a bot's, an owner id the server does not
know, a socket upgrade refused, a server that is not there), never with the token in it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker._toml import toml_dumps
from boxmaker.verify.stack import free_port
from tests.support.mattermost.fake import FakeMattermost

REPO = Path(__file__).resolve().parents[2]
OWNER = "own0000000000000000000000a"
BOT = "bot0000000000000000000000b"
CHECKS = ["gateway_config", "gateway_token", "gateway_owner", "gateway_dm", "gateway_socket"]
BOUND_S = 60.0  # one run: five REST calls and an upgrade, on a busy machine


@pytest.fixture
def fake() -> Iterator[FakeMattermost]:
    with FakeMattermost(bot_user_id=BOT, owner_user_id=OWNER) as mm:
        yield mm


def write_config(
    tmp_path: Path, url: str, token: str, owner: str = OWNER, rest_timeout_ms: int = 3000
) -> Path:
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    config = tmp_path / "gateway.toml"
    table = {
        "mattermost": {"url": url, "token_file": str(token_file), "allowed_users": [owner]},
        "limits": {"rest_timeout_ms": rest_timeout_ms, "pong_timeout_ms": 2000},
    }
    config.write_text(toml_dumps(table))
    return config


def verify(
    tmp_path: Path, url: str, token: str, owner: str = OWNER, rest_timeout_ms: int = 3000
) -> tuple[int, dict[str, str], str]:
    """Runs the checks; (exit status, check name -> its line, all the output)."""
    config = write_config(tmp_path, url, token, owner, rest_timeout_ms)
    argv = ["--gateway", str(config), "--gateway-only"]
    p = subprocess.run(
        [sys.executable, "-m", "boxmaker.verify", *argv],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        cwd=REPO,
        check=False,
    )
    lines = {}
    for line in p.stdout.splitlines():
        status, _, rest = line.partition(" ")
        if status in ("PASS", "FAIL", "SKIP"):
            lines[rest.partition(":")[0]] = line
    return p.returncode, lines, p.stdout + p.stderr


def test_a_good_setup_passes_every_gateway_check(tmp_path: Path, fake: FakeMattermost) -> None:
    status, lines, out = verify(tmp_path, fake.url, fake.token)
    assert status == 0, out
    assert list(lines) == CHECKS
    assert all(line.startswith("PASS") for line in lines.values()), out
    assert "@boxbot" in lines["gateway_token"]
    assert f"connection_id {fake.connection_ids()[0]}" in lines["gateway_socket"]
    assert any(r.path == "/api/v4/channels/direct" for r in fake.requests)
    assert fake.token not in out


def test_a_refused_token_says_to_make_a_new_one(tmp_path: Path, fake: FakeMattermost) -> None:
    wrong = "wrongtokenwrongtokenwrongx"
    status, lines, out = verify(tmp_path, fake.url, wrong)
    assert status == 1
    assert lines["gateway_token"].startswith("FAIL gateway_token: the server refused the token")
    assert "token_file" in lines["gateway_token"]
    assert list(lines) == ["gateway_config", "gateway_token"], "nothing after a refused token"
    assert wrong not in out


def test_a_token_that_is_not_a_bots_says_to_make_a_bot(tmp_path: Path) -> None:
    with FakeMattermost(bot_user_id=BOT, owner_user_id=OWNER, bot_is_bot=False) as mm:
        status, lines, out = verify(tmp_path, mm.url, mm.token)
    assert status == 1
    assert "not a bot account" in lines["gateway_token"]
    assert "Bot Accounts" in lines["gateway_token"]
    assert mm.token not in out


def test_an_unknown_owner_names_the_id_and_what_to_give(
    tmp_path: Path, fake: FakeMattermost
) -> None:
    nobody = "nobody00000000000000000000"
    status, lines, out = verify(tmp_path, fake.url, fake.token, owner=nobody)
    assert status == 1
    assert lines["gateway_owner"].startswith(f"FAIL gateway_owner: allowed_users: {nobody}")
    assert "user id" in lines["gateway_owner"]
    assert "gateway_dm" not in lines, "no DM is tried with a user that is not there"
    assert lines["gateway_socket"].startswith("PASS")
    assert fake.token not in out


@pytest.mark.parametrize("refused", [400, 502])
def test_a_refused_socket_upgrade_names_the_proxy(
    tmp_path: Path, fake: FakeMattermost, refused: int
) -> None:
    fake.refuse_upgrades(refused)
    status, lines, out = verify(tmp_path, fake.url, fake.token)
    assert status == 1
    line = lines["gateway_socket"]
    assert line.startswith(f"FAIL gateway_socket: the socket upgrade was answered {refused}")
    assert "WebSocket upgrades" in line
    assert all(lines[c].startswith("PASS") for c in CHECKS[:-1]), out


def test_a_server_that_is_not_there_names_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    # a refused connect is retried until rest_timeout_ms: 1 s, not the 3 s the others may need
    status, lines, _ = verify(tmp_path, url, "sometoken", rest_timeout_ms=1000)
    assert status == 1
    assert lines["gateway_token"].startswith(f"FAIL gateway_token: cannot reach {url}")
    assert "[mattermost] url" in lines["gateway_token"]


def test_a_bad_config_is_one_fail_line(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[mattermost]\nurl = "ftp://x"\n')
    p = subprocess.run(
        [sys.executable, "-m", "boxmaker.verify", "--gateway", str(config), "--gateway-only"],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        cwd=REPO,
        check=False,
    )
    assert p.returncode == 1
    fails = [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL")]
    assert len(fails) == 1
    assert fails[0].startswith("FAIL gateway_config:")
    assert "mattermost.url" in fails[0] or "mattermost" in fails[0]


def test_gatewayd_will_not_start_for_an_owner_the_server_does_not_know(
    tmp_path: Path, fake: FakeMattermost
) -> None:
    """At start gatewayd opens its DM with each allowed user (channels/direct): an id the server
    does not know is one line naming allowed_users, exit 2 (supervisord then gives up)."""
    nobody = "nobody00000000000000000000"
    config = write_config(tmp_path, fake.url, fake.token, owner=nobody)
    p = subprocess.run(
        [sys.executable, "-m", "boxmaker.gatewayd", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        cwd=REPO,
        check=False,
    )
    assert p.returncode == 2, p.stderr
    [line] = p.stderr.splitlines()
    assert line.startswith("gatewayd: will not start: allowed_users:")
    assert nobody in line
    assert fake.token not in line
