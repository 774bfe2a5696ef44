"""The `shell` tool and its row: its arguments checked, one sandboxed run, the result as data.
Everything it answers is untrusted (a command reads any file of the workspace), and an "always"
adds nothing: it would allow every command."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from boxmaker.brokerd.sandbox import Sandbox, SandboxLimits, ShellResult
from boxmaker.brokerd.tools.kind import Args, GrantKind, Tool, no_always
from boxmaker.proto.tool import ResultClass, ToolResponse, ToolSchema

MAX_COMMAND_BYTES = 64 << 10


class ArgumentError(ValueError):
    """The arguments are not what the schema says; the message says what to send instead."""


def parse_arguments(args: Any) -> tuple[str, int | None]:
    """`(command, timeout_ms)` from the parsed JSON arguments, or ArgumentError."""
    if not isinstance(args, dict):
        raise ArgumentError("shell: the arguments must be an object {command, timeout_ms?}")
    extra = sorted(set(args) - {"command", "timeout_ms"})
    if extra:
        raise ArgumentError(f"shell: unknown argument {extra[0]!r}; send command and timeout_ms")
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ArgumentError("shell: command must be a non-empty string")
    if "\0" in command or len(command.encode("utf-8", "surrogatepass")) > MAX_COMMAND_BYTES:
        raise ArgumentError(f"shell: command must have no NUL and be at most {MAX_COMMAND_BYTES} B")
    timeout = args.get("timeout_ms")
    if timeout is not None and (type(timeout) is not int or timeout < 1):
        raise ArgumentError("shell: timeout_ms must be a positive integer (milliseconds)")
    return command, timeout


def summary(args: Any) -> str:
    """What an approval prompt shows for a `shell` call: the whole command, never cut, where it
    runs and for how long at most."""
    try:
        command, timeout_ms = parse_arguments(args)
    except ArgumentError as err:
        return str(err)
    shown = command
    wait = f", at most {timeout_ms} ms" if timeout_ms is not None else ""
    return f"run in the sandbox (workspace read-write, no network{wait}): {shown}"


def to_response(result: ShellResult, class_: ResultClass = ResultClass.PUBLIC) -> ToolResponse:
    # A command's output is untrusted: it can be any file of the workspace, and the files there
    # may have come from anywhere (docs/decisions/sandbox.md, "Taint").
    return ToolResponse(
        content=result.text,
        class_=class_,
        untrusted=result.refused is None,
        truncated=result.cut,
    )


def call(
    sandbox: Sandbox,
    args: Any,
    class_: ResultClass = ResultClass.PUBLIC,
    cancelled: Callable[[], bool] | None = None,
) -> ToolResponse:
    """One `shell` call: bad arguments and a refused sandbox are results, never exceptions.
    `cancelled` true kills the command (loopd gave up on the call)."""
    try:
        command, timeout_ms = parse_arguments(args)
    except ArgumentError as err:
        return ToolResponse(str(err), ResultClass.PUBLIC, untrusted=False, truncated=False)
    return to_response(sandbox.run(command, timeout_ms, cancelled), class_)


def _check(args: Args) -> str | None:
    try:
        parse_arguments(args)
    except ArgumentError as err:
        return str(err).removeprefix("shell: ")
    return None


SHELL = Tool(
    ToolSchema(
        "shell",
        "Runs a command with /bin/sh in a sandbox: the workspace is the current folder "
        "(read-write), the system is read-only, there is no network. Output is capped.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the shell command line"},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "wall-clock limit"},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    ),
    {"command": str, "timeout_ms": int},
    lambda ctx, _target, args, class_: ctx.capped(call(ctx.sandbox, args, class_, ctx.cancelled)),
    lambda _ctx, _target, args: summary(args),
    GrantKind.NONE,
    lambda _args, _ws: "",
    writes=True,
    untrusted=True,
    # It reads the whole workspace: while a read is denied somewhere it asks
    # (docs/decisions/brokerd-tool-table.md).
    reads_all_as=("read_file", "list_dir"),
    always=no_always(
        'nothing: this command is asked about every time (an "always" would allow every command)'
    ),
    check=_check,
    classes=True,
    unavailable=lambda ctx: ctx.sandbox.probe(),
    section=SandboxLimits,
)
