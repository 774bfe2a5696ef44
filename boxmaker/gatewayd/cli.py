"""`gatewayd serve --config gateway.toml`: the owner's Mattermost posts to loopd, and back.

Exit status: 0 on SIGTERM or SIGINT, 2 when it will not start (a bad config or token file, a
token that is not a bot's, Mattermost refusing the token); the reason is one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from boxmaker._config.kinds import ConfigError
from boxmaker.gatewayd.catching import Refusal
from boxmaker.gatewayd.config import load_config, read_token
from boxmaker.gatewayd.mattermost.types import MattermostError, redact
from boxmaker.gatewayd.serve import serve


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gatewayd", description="Carries the owner's Mattermost posts to loopd as turns."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="connect to Mattermost and serve until stopped")
    run.add_argument("--config", required=True, help="gateway.toml")
    check = sub.add_parser("check", help="check the config and the token file, then exit")
    check.add_argument("--config", required=True, help="gateway.toml")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        token = read_token(config, args.config)
    except ConfigError as e:
        sys.stderr.write(f"gatewayd: {e}\n")
        return 2
    if args.command == "check":
        print(f"gatewayd: {args.config}: ok")
        return 0
    try:
        asyncio.run(_run(config, token))
    except (Refusal, MattermostError) as e:
        sys.stderr.write(redact(f"gatewayd: will not start: {e}", token) + "\n")
        return 2
    return 0


async def _run(config: object, token: str) -> None:
    task = asyncio.ensure_future(serve(config, token))  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        sys.stderr.write("gatewayd: stopped\n")
