"""`loopd <command> --config <path>`: the daemon's command line. `main(argv=None) -> int`.

    loopd selftest --config <path>
        Runs the three start-up checks (`selftest`) against the configured server and prints one
        line per check: `ok` or `FAILED`, and what it found. Exit 0 when all pass, else 1.

    loopd turn --config <path> --session <id> [--new] --say <text> [--no-thinking]
        One turn of a session, in this process (turn/command.py): each event, then the outcome,
        as one JSON object per line. Exit 0 on turn_done, 1 on an error.

    loopd complete --config <path> (--say <text> | --messages <file.json>) [--no-thinking]
        One request through the whole client (slot gate, waits, retry) on the first configured
        slot. Prints each ChatEvent, then the Completion or the error, as one JSON object per
        line on stdout. Exit 0 on a completion, 1 on an error.

A config that cannot be loaded exits 1 with the ConfigError's message (it names the file and the
key) on stderr; a bad argument or `--messages` file exits 2 like any usage error. No traceback
reaches the user for any of these. `loopd serve` comes with the channel (a later issue).
"""

from __future__ import annotations

import argparse
import enum
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from boxmaker.loopd.config import Config, ConfigError, load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.types import (
    ChatEvent,
    ChatRequest,
    InferError,
    completion_to_json,
    event_to_json,
)
from boxmaker.loopd.selftest import iter_selftest
from boxmaker.loopd.turn.command import run_turn_command
from boxmaker.proto import BodyError, ChatMessage, UserMessage, chat_message_from_json

PROG = "loopd"


class ExitStatus(enum.IntEnum):
    OK = 0
    ERROR = 1  # a check failed, the request ended in an error, or the config is wrong
    USAGE = 2  # bad arguments (argparse's own code) or a bad --messages file


class UsageError(Exception):
    """An argument that parsed but is unusable, e.g. a --messages file that is not messages."""


def _print_json(out: IO[str], obj: dict[str, Any]) -> None:
    out.write(orjson.dumps(obj).decode() + "\n")
    out.flush()  # a watcher sees each event as it happens


def _error(command: str, message: str) -> None:
    print(f"{PROG} {command}: {message}", file=sys.stderr, flush=True)


# ---- loopd selftest ----------------------------------------------------------------------------


def cmd_selftest(config: Config, _args: argparse.Namespace) -> ExitStatus:
    failed = []
    for result in iter_selftest(config, Client(config.inference)):
        print(result.line(), flush=True)
        if not result.ok:
            failed.append(result.check)
    if failed:
        _error(
            "selftest", f"FAILED ({', '.join(failed)}); loopd will not start against this server"
        )
        return ExitStatus.ERROR
    return ExitStatus.OK


# ---- loopd complete ----------------------------------------------------------------------------


_JSON_KINDS: dict[type, str] = {
    list: "an empty array",
    dict: "an object",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def read_messages(path: Path) -> tuple[ChatMessage, ...]:
    """A JSON array of chat messages in the OpenAI form (roles system, user, assistant, tool).

    Raises:
        UsageError: naming the file and what is wrong with it (unreadable, not JSON, not an
            array, empty, or a message that does not decode, with its index and field).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--messages {path}: cannot read it: {exc.strerror or exc}") from None
    try:
        items = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"--messages {path}: not JSON: {exc}") from None
    if not isinstance(items, list) or not items:
        got = _JSON_KINDS.get(type(items), "a value")
        raise UsageError(
            f"--messages {path}: expected a non-empty JSON array of messages, got {got}"
        )
    try:
        return tuple(chat_message_from_json(m, f"messages[{i}]") for i, m in enumerate(items))
    except BodyError as exc:
        raise UsageError(f"--messages {path}: {exc}") from None


def complete_request(config: Config, args: argparse.Namespace) -> ChatRequest:
    messages = read_messages(args.messages) if args.messages else (UserMessage(args.say),)
    return ChatRequest(config.inference.slots[0], messages, (), thinking=not args.no_thinking)


def cmd_complete(config: Config, args: argparse.Namespace) -> ExitStatus:
    req = complete_request(config, args)
    out = sys.stdout

    def on_event(event: ChatEvent) -> None:
        _print_json(out, event_to_json(event))

    try:
        completion = Client(config.inference).chat_with_retry(req, on_event)
    except InferError as err:
        _print_json(out, {"type": "error", **err.to_json()})
        _error("complete", f"{err.TAG}: {err}")
        return ExitStatus.ERROR
    _print_json(out, completion_to_json(completion))
    return ExitStatus.OK


# ---- loopd turn (boxmaker/loopd/turn/command.py) ------------------------------------------------


def cmd_turn(config: Config, args: argparse.Namespace) -> ExitStatus:
    status = run_turn_command(
        config,
        session=args.session,
        new=args.new,
        say=args.say,
        thinking=not args.no_thinking,
        out=sys.stdout,
        err=sys.stderr,
    )
    return ExitStatus(status)


# ---- the parser --------------------------------------------------------------------------------

Command = Callable[[Config, argparse.Namespace], ExitStatus]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Boxmaker's agent daemon: its inference path and start-up checks."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, run: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "--config",
            required=True,
            type=Path,
            metavar="PATH",
            help="loopd's TOML config (conf/loopd.toml.example shows every key)",
        )
        sub.set_defaults(run=run)
        return sub

    add(
        "selftest",
        cmd_selftest,
        "Check the server against [expect], that tool calls parse and that turn 2 hits the cache.",
    )
    complete = add(
        "complete",
        cmd_complete,
        "Send one request through the client and print its events as JSON lines.",
    )
    what = complete.add_mutually_exclusive_group(required=True)
    what.add_argument("--say", metavar="TEXT", help="one user message")
    what.add_argument(
        "--messages",
        type=Path,
        metavar="FILE",
        help="a JSON array of messages (roles system, user, assistant, tool)",
    )
    complete.add_argument(
        "--no-thinking", action="store_true", help="ask the chat template to leave thinking off"
    )
    turn = add("turn", cmd_turn, "Run one turn of a session in this process; events as JSON lines.")
    turn.add_argument("--session", required=True, metavar="ID", help="the session's id")
    turn.add_argument("--new", action="store_true", help="create the session (it must not exist)")
    turn.add_argument("--say", required=True, metavar="TEXT", help="the user's message")
    turn.add_argument("--no-thinking", action="store_true", help="ask for no reasoning this turn")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns its exit status (see ExitStatus)."""
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        _error(args.command, str(exc))
        return ExitStatus.ERROR
    try:
        return int(args.run(config, args))
    except UsageError as exc:
        _error(args.command, str(exc))
        return ExitStatus.USAGE
    except KeyboardInterrupt:
        _error(args.command, "interrupted")
        return 130  # the shell's code for SIGINT
    except BrokenPipeError:
        # The reader went away (`loopd complete ... | head -1`): nothing left to tell anyone.
        # Python would report the pipe again when it flushes stdout at exit, so point stdout at
        # /dev/null first (the recipe in the `signal` module's documentation).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return ExitStatus.ERROR
