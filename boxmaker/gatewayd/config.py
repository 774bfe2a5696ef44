"""gatewayd's config, `gateway.toml` (M4 section 9), checked whole at load, and its token file.

Every key is declared once below with its kind and bounds (boxmaker/_config: the walk loopd's
config uses), so an unknown key ("did you mean"), a wrong type or a value out of range is one
line naming the file and the key. The token is never in the config: `token_file` names a file of
gatewayd's own, mode 0600 (no group or other bits), whose content is the token; it is read by
`read_token`, never logged, never put in an error.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from boxmaker._config.kinds import (
    MS,
    PATH,
    SOCKET,
    ConfigError,
    Ctx,
    integer,
    kind,
    list_of,
    text,
)
from boxmaker._config.readfile import read_bounded
from boxmaker._config.walker import build, parse_toml
from boxmaker._defaults import DEFAULT_SOCKET

MAX_CONFIG_BYTES = 1 << 20
MAX_TOKEN_BYTES = 4096
EXAMPLE = "conf/gateway.example.toml"

# Mattermost ids: 26 characters of [a-z0-9] (the server's NewId).
_ID = r"[a-z0-9]{26}"
USER_ID = text("a Mattermost user id (26 lowercase letters and digits)", _ID)
CHANNEL_ID = text("a Mattermost channel id (26 lowercase letters and digits)", _ID)
URL = kind(
    "an http:// or https:// URL of the Mattermost server (no path beyond the server's own)",
    (str,),
    lambda v: re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", v) is not None,
    lambda v: v.rstrip("/"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MattermostConfig:
    """[mattermost]: the server, the bot's token file, who may talk, where."""

    url: Annotated[str, URL, "the server, e.g. https://chat.example.org"]
    token_file: Annotated[Path, PATH, "a 0600 file holding the bot's token"]
    allowed_users: Annotated[
        tuple[str, ...],
        list_of(USER_ID, "a non-empty list of unique Mattermost user ids", unique=True),
        "the owner's user id",
    ]
    channels: Annotated[
        tuple[str, ...],
        list_of(CHANNEL_ID, "a list of unique Mattermost channel ids", unique=True, nonempty=False),
    ] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitsConfig:
    """[limits]: every bound gatewayd keeps."""

    queue_per_session: Annotated[int, integer(1, 1000, "posts waiting per session")] = 10
    max_inbound_chars: Annotated[int, integer(1, 1_000_000, "characters")] = 16_383
    max_reply_posts: Annotated[int, integer(1, 100, "posts per answer")] = 5
    catchup_max_posts: Annotated[int, integer(1, 10_000, "posts per channel")] = 20
    catchup_max_age_s: Annotated[int, integer(1, 30 * 86_400, "seconds, at most 30 days")] = 3600
    typing_interval_ms: Annotated[int, MS] = 4000
    ping_interval_ms: Annotated[int, MS] = 30_000
    pong_timeout_ms: Annotated[int, MS] = 10_000
    rest_timeout_ms: Annotated[int, MS] = 15_000
    backoff_max_ms: Annotated[int, MS] = 60_000

    def _relations(self) -> Iterator[tuple[str, str]]:
        if self.pong_timeout_ms >= self.ping_interval_ms:
            yield (
                "pong_timeout_ms",
                "must be below ping_interval_ms (a pong comes before the next ping)",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopdConfig:
    """[loopd]: loopd's channel socket."""

    socket: Annotated[Path, SOCKET] = DEFAULT_SOCKET


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerdConfig:
    """[brokerd]: brokerd's chat socket, where the owner's yes or no from the chat goes; used
    only when brokerd's own config turns chat approvals on (docs/gateway.md)."""

    chat_socket: Annotated[Path | None, SOCKET] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StateConfig:
    """[state]: where gatewayd keeps its cursors (one small file per channel)."""

    folder: Annotated[Path, PATH] = Path("/var/lib/boxmaker-gateway")


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    mattermost: MattermostConfig
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    loopd: LoopdConfig = field(default_factory=LoopdConfig)
    brokerd: BrokerdConfig = field(default_factory=BrokerdConfig)
    state: StateConfig = field(default_factory=StateConfig)


def parse_config(text_: str, source: str, base_dir: Path) -> GatewayConfig:
    """The GatewayConfig in `text_`; paths resolve against `base_dir`. Raises ConfigError."""
    config: GatewayConfig = build(
        GatewayConfig, parse_toml(text_, source), Ctx(source, base_dir, {})
    )
    return config


def load_config(path: str | Path) -> GatewayConfig:
    """Reads and checks `path`. Raises ConfigError naming the file (and the key)."""
    source = str(path)
    data = read_bounded(Path(path), source, MAX_CONFIG_BYTES, EXAMPLE)
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, f"not UTF-8 text (byte {exc.start})") from None
    return parse_config(content, source, Path(os.path.abspath(path)).parent)


def read_token(config: GatewayConfig, source: str) -> str:
    """The bot's token from [mattermost] token_file: a regular file of mode 0600 (or stricter),
    one line. Raises ConfigError naming the file and the key, never quoting the content."""
    path = config.mattermost.token_file
    key = "mattermost.token_file"

    def refuse(why: str) -> ConfigError:
        return ConfigError(source, key, f"{key} ({path}): {why}")

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise refuse(f"cannot read it: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode) and stat.S_IMODE(mode) & 0o077:
        raise refuse(
            f"mode {stat.S_IMODE(mode):04o}: the token file must be readable by gatewayd's user "
            f"alone (chmod 600 {path})"
        )
    data = read_bounded(path, f"{source}: {key} ({path})", MAX_TOKEN_BYTES, EXAMPLE)
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise refuse("not ASCII text; it holds the bot's token and nothing else") from None
    if not token or any(c.isspace() for c in token):
        raise refuse("it must hold the bot's token alone, on one line")
    return token
