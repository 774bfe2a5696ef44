"""`loopd <command> --config <path>`: the daemon's command line.

`main(argv=None, env=None) -> ExitStatus`, in httpie's shape: every byte goes through the
injected `Environment`'s streams (argparse's usage and help too), so tests call it in-process
(tests/support/cli.py).

    loopd selftest --config <path>
        Runs the three start-up checks (`selftest`) against the configured server and prints one
        line per check: `ok` or `FAILED`, and what it found. Exit 0 when all pass, else 1. With
        [cache] slot_save, a first line says whether the server saves slots (`ok` or `off`).

    loopd turn --config <path> --session <id> [--new] --say <text> [--thinking|--no-thinking]
        One turn of a session, in this process (turn/command.py): each event, then the outcome,
        as one JSON object per line. Exit 0 on turn_done, 1 on an error.

    loopd complete --config <path> (--say <text> | --messages <file.json>) [--no-thinking]
        One request through the whole client (slot gate, waits, retry) on the first configured
        slot. Prints each ChatEvent, then the Completion or the error, as one JSON object per
        line on stdout. Exit 0 on a completion, 1 on an error.

A config that cannot be loaded exits 1 with the ConfigError's message (one line naming the file
and the key) on stderr; a bad argument or `--messages` file exits 2 like any usage error; Ctrl-C
exits 130. No traceback reaches the user for any of these.

    loopd serve --config <path>
        The daemon (serve.py): removes a stale socket, runs the self-test (exit 1 if it fails),
        binds `[channel] socket` 0600 and serves the channel until SIGTERM (exit 0).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from boxmaker._cli import (
    Environment,
    ExitStatus,
    Parser,
    ParserExit,
    guarded,
    interruptible,
    print_json_line,
)
from boxmaker.loopd import serve
from boxmaker.loopd.config import Config, ConfigError, read_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.gate import SlotGate
from boxmaker.loopd.llama.types import ChatEvent, ChatRequest, completion_to_json, event_to_json
from boxmaker.loopd.selftest import run_selftest
from boxmaker.loopd.turn.command import run_turn_command
from boxmaker.proto import (
    BodyError,
    ChatMessage,
    UserMessage,
    chat_message_from_json,
    load_json,
)

if TYPE_CHECKING:
    pass

PROG = "loopd"


class UsageError(Exception):
    """An argument that parsed but is unusable, e.g. a --messages file that is not messages."""


def _error(env: Environment, command: str, message: str) -> None:
    env.stderr.write(f"{PROG} {command}: {message}\n")
    env.stderr.flush()


# ---- loopd selftest ----------------------------------------------------------------------------


def cmd_selftest(config: Config, _args: argparse.Namespace, env: Environment) -> ExitStatus:
    def say(line: str) -> None:  # with [cache] slot_save, a first line: does the server save slots
        env.stdout.write(line.removeprefix("selftest ") + "\n")
        env.stdout.flush()

    def warn(line: str) -> None:
        env.stderr.write(f"loopd selftest: {line}\n")

    gate = SlotGate(config.inference.queue_length)
    failed = run_selftest(config, gate, say, warn, serving=False).failed
    if failed:
        why = f"FAILED ({', '.join(failed)}); loopd will not start against this server"
        _error(env, "selftest", why)
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
    items = load_json(data, "the file", lambda m: UsageError(f"--messages {path}: {m}"))
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


def cmd_complete(config: Config, args: argparse.Namespace, env: Environment) -> ExitStatus:
    req = complete_request(config, args)
    out = env.stdout

    def on_event(event: ChatEvent) -> None:
        print_json_line(out, event_to_json(event))

    try:
        completion = Client(config.inference).chat_with_retry(req, on_event)
    except InferError as err:
        print_json_line(out, {"type": "error", **err.to_json()})
        _error(env, "complete", err.describe())
        return ExitStatus.ERROR
    print_json_line(out, completion_to_json(completion))
    return ExitStatus.OK


# ---- loopd turn (boxmaker/loopd/turn/command.py) ------------------------------------------------


def cmd_turn(config: Config, args: argparse.Namespace, env: Environment) -> ExitStatus:
    status = run_turn_command(
        config,
        session=args.session,
        new=args.new,
        say=args.say,
        thinking=args.thinking,
        out=env.stdout,
        err=env.stderr,
    )
    return ExitStatus(status)


# ---- loopd serve (boxmaker/loopd/serve.py) ----------------------------------------------------


def cmd_serve(config: Config, args: argparse.Namespace, env: Environment) -> ExitStatus:
    return serve.run(args.config_source, config, env)


# ---- the parser --------------------------------------------------------------------------------

Command = Callable[[Config, argparse.Namespace, Environment], ExitStatus]


def build_parser(env: Environment | None = None) -> argparse.ArgumentParser:
    env = env if env is not None else Environment()
    parser = Parser(
        prog=PROG,
        description="Boxmaker's agent daemon: its inference path and start-up checks.",
        env=env,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, run: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text, env=env)
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
    add(
        "serve",
        cmd_serve,
        "Run the self-test, then serve the channel on [channel] socket until SIGTERM.",
    )
    turn = add("turn", cmd_turn, "Run one turn of a session in this process; events as JSON lines.")
    turn.add_argument("--session", required=True, metavar="ID", help="the session's id")
    turn.add_argument("--new", action="store_true", help="create the session (it must not exist)")
    turn.add_argument("--say", required=True, metavar="TEXT", help="the user's message")
    think = turn.add_mutually_exclusive_group()
    think.add_argument(
        "--thinking", dest="thinking", action="store_const", const=True, default=None,
        help="ask for reasoning this turn (default: [loop] thinking)",
    )  # fmt: skip
    think.add_argument(
        "--no-thinking", dest="thinking", action="store_const", const=False,
        help="ask for no reasoning this turn (default: [loop] thinking)",
    )  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None, env: Environment | None = None) -> ExitStatus:
    """Runs one command.

    Args:
        argv: the arguments after the program name; None means sys.argv[1:].
        env: the streams to use; None means the process's own.

    Returns:
        Its exit status (see ExitStatus): a config that does not load is ERROR.
    """
    if env is None:  # the process itself: a SIGINT it inherited ignored still stops it
        interruptible()
    env = env if env is not None else Environment()
    try:
        args = build_parser(env).parse_args(argv)
    except ParserExit as done:
        return ExitStatus(done.status)
    try:
        args.config_source = read_config(args.config)  # read once: `serve` hands it to workers
        config = args.config_source.parse()
    except ConfigError as exc:
        _error(env, args.command, str(exc))
        return ExitStatus.ERROR

    def run() -> ExitStatus:
        try:
            status: ExitStatus = args.run(config, args, env)
        except UsageError as exc:
            _error(env, args.command, str(exc))
            return ExitStatus.USAGE
        return status

    return guarded(env, run, on_interrupt=f"{PROG} {args.command}: interrupted")
