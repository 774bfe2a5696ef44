"""gateway.toml (M4 section 9): every key checked, one line naming the file and the key; the
token only from a 0600 token file, never quoted."""

from __future__ import annotations

from pathlib import Path

import pytest

from boxmaker._config.kinds import ConfigError
from boxmaker.gatewayd.cli import main
from boxmaker.gatewayd.config import load_config, parse_config, read_token

REPO = Path(__file__).resolve().parents[2]
OWNER = "abcdefghijklmnopqrstuvwxyz"
GOOD = f"""
[mattermost]
url = "https://chat.example.org/"
token_file = "token"
allowed_users = ["{OWNER}"]
"""


def parse(text: str) -> object:
    return parse_config(text, "gateway.toml", Path("/etc/bx"))


def error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text)
    message = str(info.value)
    assert message.startswith("gateway.toml: ")
    assert "\n" not in message
    return message


def test_the_example_and_a_minimal_config_load_with_the_defaults() -> None:
    example = load_config(REPO / "conf" / "gateway.example.toml")
    assert example.limits.max_reply_posts == 5
    config = parse(GOOD)
    assert config.mattermost.url == "https://chat.example.org"  # type: ignore[attr-defined]
    assert config.mattermost.token_file == Path("/etc/bx/token")  # type: ignore[attr-defined]
    assert config.limits.queue_per_session == 10  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("[limits]\nqueue_per_sesion = 3", "did you mean limits.queue_per_session?"),
        ("[limit]\nx = 1", "unknown section [limit]"),
        ("[limits]\nmax_reply_posts = 0", "limits.max_reply_posts must be an integer from 1"),
        ("[limits]\ntyping_interval_ms = true", "limits.typing_interval_ms must be"),
        ("[limits]\npong_timeout_ms = 40000", "pong_timeout_ms must be below ping_interval_ms"),
        ("[mattermost.x]\ny = 1", "unknown section [mattermost.x]"),
        ("[loopd]\nsocket = 3", "loopd.socket must be"),
        ("[mattermost]\ntoken = 'abc'", "unknown key mattermost.token"),
    ],
)
def test_a_wrong_key_is_one_line_naming_it(extra: str, words: str) -> None:
    text = GOOD + "\n" + extra if not extra.startswith("[mattermost]") else GOOD + extra[12:]
    assert words in error(text)


def test_required_keys_and_id_shapes() -> None:
    assert "missing required key" in error("[mattermost]\nurl = 'https://x'")
    bad = GOOD.replace(OWNER, "Owner Name")
    assert "mattermost.allowed_users must be" in error(bad)
    assert "mattermost.url must be" in error(GOOD.replace("https://chat", "ftp://chat"))


def test_the_token_file_must_be_0600_and_its_content_is_never_quoted(tmp_path: Path) -> None:
    secret = "s3cr3ttokenvalue0123456789"
    token = tmp_path / "token"
    token.write_text(secret + "\n")
    config = parse_config(GOOD, "gateway.toml", tmp_path)
    token.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600") as info:
        read_token(config, "gateway.toml")
    assert secret not in str(info.value)
    token.chmod(0o600)
    assert read_token(config, "gateway.toml") == secret
    token.write_text(secret + " more\n")
    with pytest.raises(ConfigError, match="token alone") as info:
        read_token(config, "gateway.toml")
    assert secret not in str(info.value)


def test_check_says_ok_or_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gateway.toml").write_text(GOOD)
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "token").chmod(0o600)
    assert main(["check", "--config", str(tmp_path / "gateway.toml")]) == 0
    (tmp_path / "token").chmod(0o640)
    assert main(["check", "--config", str(tmp_path / "gateway.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "mattermost.token_file" in err
