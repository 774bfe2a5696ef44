"""`clock`: the date and time in UTC as RFC 3339 text, then its weekday (proto's clock_text:
asked "what day of the week is it?", a small model given the RFC 3339 text alone read out the
date: issue 40). It reads nothing and reaches nothing, so it needs no grant (its row has no
target); it is a core tool in every session's tools array (loopd's registry, whose description
is M2b's text)."""

from __future__ import annotations

from datetime import UTC, datetime

from boxmaker.brokerd.tools.kind import Args, Context, GrantKind, Target, Tool
from boxmaker.proto import ResultClass, ToolResponse, ToolSchema
from boxmaker.proto.rfc3339 import clock_text


def _run(_ctx: Context, _target: Target, _args: Args, _class: ResultClass) -> ToolResponse:
    return ToolResponse(
        clock_text(datetime.now(UTC)), ResultClass.PUBLIC, untrusted=False, truncated=False
    )


CLOCK = Tool(
    ToolSchema(
        "clock",
        "Returns the current date and time in UTC, as RFC 3339 text.",
        {"type": "object", "properties": {}},
    ),
    {},
    _run,
    lambda _ctx, _target, _args: "read the clock",
    GrantKind.NONE,
    writes=False,
    untrusted=False,
)
