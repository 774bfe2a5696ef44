"""`make verify-device GATEWAY=gateway.toml`: gatewayd's checks against the owner's Mattermost.

Run before the stack's checks, against the server the config names, as gatewayd would reach it:
the config and its token file; the token (`users/me` answers and says `is_bot`); each allowed user
exists; the bot's direct channel with each can be made (gatewayd makes it at start); the socket
upgrades with the token and says hello. Each is one line, PASS or FAIL, a FAIL saying what to fix.
The token is in no line: every text goes through `redact`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from boxmaker._config.kinds import ConfigError
from boxmaker.gatewayd.config import GatewayConfig, load_config, read_token
from boxmaker.gatewayd.mattermost import ClientLimits, MattermostClient, MattermostError
from boxmaker.gatewayd.mattermost.types import Me, redact
from boxmaker.verify.checks import Check, Status

BOT_ACCOUNTS = "System Console > Integrations > Bot Accounts"
OWNER = "each allowed user exists"
DM = "the bot's direct channel with each allowed user"
SOCKET = "a socket upgrade with the token, then hello"


def gateway_checks(path: Path) -> list[Check]:
    """Every gateway check, in order; the later ones are not run past a FAIL they need."""
    try:
        config = load_config(path)
        token = read_token(config, str(path))
    except ConfigError as e:
        return [_fail("gateway_config", str(e), "a gateway.toml gatewayd accepts, and its token")]
    checks = [Check("gateway_config", Status.PASS, f"{path}: ok", "a valid gateway.toml")]
    checks += asyncio.run(_server_checks(config, token))
    return [Check(c.name, c.status, redact(c.found, token), c.expected) for c in checks]


def _fail(name: str, found: str, expected: str) -> Check:
    return Check(name, Status.FAIL, found, expected)


async def _server_checks(config: GatewayConfig, token: str) -> list[Check]:
    m, lim = config.mattermost, config.limits
    limits = ClientLimits(
        ping_interval_ms=lim.ping_interval_ms,
        pong_timeout_ms=lim.pong_timeout_ms,
        rest_timeout_ms=lim.rest_timeout_ms,
        backoff_max_ms=lim.backoff_max_ms,
    )
    client = MattermostClient(m.url, token, limits)
    out: list[Check] = []
    try:
        me = await _token(client, m.url, out)
        if me is None:
            return out
        for user in m.allowed_users:
            try:
                u = await client.user(user)
                out.append(Check("gateway_owner", Status.PASS, f"{user} is @{u.username}", OWNER))
            except MattermostError as e:
                out.append(_fail("gateway_owner", _unknown_user(user, e), OWNER))
                continue
            try:
                dm = await client.direct_channel(me.id, user)
                out.append(Check("gateway_dm", Status.PASS, f"the DM with {user} is {dm}", DM))
            except MattermostError as e:
                found = f"cannot open a DM with {user} ({e}); check the bot may message users"
                out.append(_fail("gateway_dm", found, DM))
        try:
            cid = await client.hello()
            said = f"hello, connection_id {cid or '(none: an old server, no resume)'}"
            out.append(Check("gateway_socket", Status.PASS, said, SOCKET))
        except MattermostError as e:
            out.append(_fail("gateway_socket", f"{e}; {_socket_hint(e)}", SOCKET))
    finally:
        await client.close()
    return out


async def _token(client: MattermostClient, url: str, out: list[Check]) -> Me | None:
    expected = "users/me answers and is_bot is true"
    try:
        me = await client.me()
    except MattermostError as e:
        if e.status in (401, 403):
            fix = (
                f"the server refused the token ({e.status}): make a new token for the bot "
                f"({BOT_ACCOUNTS}) and write it alone in token_file"
            )
        else:
            fix = f"cannot reach {url} ({e}): check [mattermost] url and that the server is up"
        out.append(_fail("gateway_token", fix, expected))
        return None
    if not me.is_bot:
        found = (
            f"the token is @{me.username}'s, which is not a bot account: make a bot "
            f"({BOT_ACCOUNTS}) and use its token"
        )
        out.append(_fail("gateway_token", found, expected))
        return None
    out.append(Check("gateway_token", Status.PASS, f"@{me.username} ({me.id}), a bot", expected))
    return me


def _unknown_user(user: str, e: MattermostError) -> str:
    if e.status == 404:
        return (
            f"allowed_users: {user} is no user on this server; give the owner's user id "
            "(Profile > ... > Copy user ID), not the username"
        )
    return f"cannot read user {user}: {e}"


def _socket_hint(e: MattermostError) -> str:
    if e.status in (401, 403):
        return "the server refused the token on the socket: check the bot account is enabled"
    if e.status is not None:
        return "a proxy in front of the server must pass WebSocket upgrades on /api/v4/websocket"
    return "check the server's WebSocket port is reachable from the box (and any proxy on it)"
