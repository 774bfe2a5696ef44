"""The `shell` tool and its row: its arguments checked, one sandboxed run, the result as data.
Everything it answers is untrusted (a command reads any file of the workspace), and an "always"
adds nothing: it would allow every command."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from boxmaker.brokerd.sandbox import Sandbox, SandboxLimits, ShellResult
from boxmaker.brokerd.tools.kind import (
    Args,
    BadArguments,
    Context,
    GrantKind,
    Setup,
    Target,
    Tool,
    no_always,
)
from boxmaker.proto.tool import ResultClass, ToolResponse, ToolSchema

MAX_COMMAND_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class ShellArgs:
    """A `shell` call's arguments, parsed once (the row's `parse`)."""

    command: str
    timeout_ms: int | None = None


def parse_arguments(args: Any) -> ShellArgs:
    """The parsed JSON arguments as ShellArgs, or BadArguments saying what to send instead."""
    if not isinstance(args, dict):
        raise BadArguments("shell: the arguments must be an object {command, timeout_ms?}")
    extra = sorted(set(args) - {"command", "timeout_ms"})
    if extra:
        raise BadArguments(f"shell: unknown argument {extra[0]!r}; send command and timeout_ms")
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise BadArguments("shell: command must be a non-empty string")
    if "\0" in command or len(command.encode("utf-8", "surrogatepass")) > MAX_COMMAND_BYTES:
        raise BadArguments(f"shell: command must have no NUL and be at most {MAX_COMMAND_BYTES} B")
    timeout = args.get("timeout_ms")
    if timeout is not None and (type(timeout) is not int or timeout < 1):
        raise BadArguments("shell: timeout_ms must be a positive integer (milliseconds)")
    return ShellArgs(command, timeout)


def describe(call: ShellArgs) -> str:
    """What an approval prompt shows for a `shell` call: the whole command, never cut, where it
    runs and for how long at most."""
    wait = f", at most {call.timeout_ms} ms" if call.timeout_ms is not None else ""
    return f"run in the sandbox (workspace read-write, no network{wait}): {call.command}"


def summary(args: Any) -> str:
    """`describe` of raw arguments (or what is wrong with them): for a caller without a row."""
    try:
        return describe(parse_arguments(args))
    except BadArguments as err:
        return str(err)


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
    """One `shell` call from raw arguments: bad arguments and a refused sandbox are results,
    never exceptions. `cancelled` true kills the command (loopd gave up on the call)."""
    try:
        parsed = args if isinstance(args, ShellArgs) else parse_arguments(args)
    except BadArguments as err:
        return ToolResponse(str(err), ResultClass.PUBLIC, untrusted=False, truncated=False)
    return to_response(sandbox.run(parsed.command, parsed.timeout_ms, cancelled), class_)


def _parse(args: Args) -> ShellArgs:
    try:
        return parse_arguments(args)
    except BadArguments as err:
        raise BadArguments(str(err).removeprefix("shell: ")) from None


def _run(ctx: Context, _target: Target, _args: Args, class_: ResultClass) -> ToolResponse:
    sandbox, parsed = ctx.state(Sandbox), ctx.arguments(ShellArgs)
    return ctx.capped(call(sandbox, parsed, class_, ctx.cancelled))


def _sandbox(setup: Setup) -> Sandbox:
    """shell's state: the sandbox, over the workspace, with [broker.shell]'s limits."""
    return Sandbox(setup.config.workspace, setup.own(SandboxLimits))


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
    _run,
    lambda ctx, _target, _args: describe(ctx.arguments(ShellArgs)),
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
    parse=_parse,
    classes=True,
    unavailable=lambda ctx: ctx.state(Sandbox).probe(),
    section=SandboxLimits,
    state=_sandbox,
)
