"""`python -m boxmaker.brokerd serve --config <toml>` and `verify --log <path>`."""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

from boxmaker._cli import Environment, ExitStatus
from boxmaker._daemon.log import DaemonLog
from boxmaker.brokerd.config import BrokerConfig, ConfigError, parse_config
from boxmaker.brokerd.ledger import replay
from boxmaker.brokerd.mcp.config import parse_mcp
from boxmaker.brokerd.mcp.rows import ReplayTable, replayed_row
from boxmaker.brokerd.policy import LogError
from boxmaker.brokerd.state import FAILED, STARTING, state_path, write_state
from boxmaker.brokerd.tools.table import TABLE
from boxmaker.session.chain import ChainError
from boxmaker.session.chain_files import verify_files
from boxmaker.session.errors import SessionError
from boxmaker.session.files import read_regular

CONFIG_MAX_BYTES = 1 << 20
OWN_FILES = ("socket", "owner_socket", "grants", "log", "home")  # never inside the workspace


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> ExitStatus:
    env = env or Environment()
    parser = argparse.ArgumentParser(prog="brokerd")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve broker.sock, owner.sock (and chat.sock when on)")
    serve.add_argument("--config", required=True)
    verify = sub.add_parser(
        "verify", help="check the decision log's chain (its rotated files too) and replay it"
    )
    verify.add_argument("--log", required=True)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return ExitStatus.USAGE if exc.code else ExitStatus.OK
    log = DaemonLog("brokerd", env.stdout, env.stderr)
    if args.command == "verify":
        chain = None
        try:
            unreplayed: list[str] = []  # MCP calls it cannot decide again (ledger.replay)
            chain, _ = verify_files(args.log)  # every file of it, oldest first
            count = replay(chain.data, ReplayTable(TABLE), unreplayed, replayed_row)
        except (OSError, LogError, ChainError) as exc:
            why = str(exc) if chain is None else chain.locate(str(exc))
            log.warn(f"verify: FAILED: {why}")
            return ExitStatus.ERROR
        log.say(
            f"verify: ok: the chain holds and {count} decision(s) replay the same"
            + (
                f"; {len(unreplayed)} MCP call(s) not decided again (no row facts logged, "
                "or refused by the server's schema)"
                if unreplayed
                else ""
            )
        )
        return ExitStatus.OK
    config: BrokerConfig | None = None
    try:
        data = read_regular(Path(args.config), CONFIG_MAX_BYTES, follow=True)  # no FIFO hang
        source = str(args.config)
        if data is None:
            raise ConfigError(source, None, "no such file (conf/brokerd.toml.example shows one)")
        folder = os.path.dirname(os.path.abspath(args.config))
        config = parse_config(data, folder, TABLE.sections(), source)
        write_state(state_path(config.socket), STARTING)
        refuse_paths_in_workspace(config, source)
        servers = parse_mcp(config.mcp, folder, source)
        if servers and importlib.util.find_spec("mcp") is None:
            name = next(iter(servers))
            raise ConfigError(
                source,
                f"mcp.{name}",
                f"[mcp.{name}]: the MCP client is not installed; install the "
                "extra (pip install 'boxmaker[mcp]'; make install does), or remove [mcp.*]",
            )
    except (OSError, ConfigError, SessionError) as exc:
        # A ConfigError's message starts with the file's name already.
        said = str(exc) if isinstance(exc, ConfigError) else f"{args.config}: {exc}"
        log.warn(f"serve: {said}")
        if config is not None:  # else where its state goes is not known
            write_state(state_path(config.socket), FAILED, error=said)
        return ExitStatus.USAGE
    from boxmaker.brokerd.serve import run

    return run(config, log, servers)


def refuse_paths_in_workspace(config: BrokerConfig, source: str = "brokerd's config") -> None:
    """ConfigError when one of brokerd's own files is inside the workspace, after resolving
    links: there the sandbox and the file tools could write it (an owner.sock in the workspace
    let a command answer an approval)."""
    workspace = os.path.realpath(config.workspace)
    paths = [(key, getattr(config, key)) for key in OWN_FILES]
    if config.chat is not None:
        paths.append(("chat_approvals.socket", config.chat.socket))
    for key, path in paths:
        resolved = os.path.realpath(path)
        if resolved == workspace or resolved.startswith(workspace.rstrip("/") + "/"):
            shown = path if resolved == path else f"{path} (that is {resolved})"
            raise ConfigError(
                source,
                f"broker.{key}",
                f"broker.{key}: {shown} is inside the workspace {workspace}, where the agent "
                "writes; put brokerd's own files outside it",
            )
