"""The approval question as the owner reads it, bounded by what a terminal holds. [core]

brokerd sends the whole call (proto.broker.HeldCall); this module lays it out: the size first,
then the call with every control and format character escaped (escape.py), why it asks, the grant
"always" would add, then the question. A call is only approvable where it is seen whole (issue
27, issue 37 item 6): a shell command of `curl -d @secrets/key ...`, 5,000 newlines and `ls -la`
scrolled its head off a 40-line screen and past a 2,000-line scrollback. So runs of blank lines
are collapsed into one line of ours (`  ~ [4,998 blank lines]`: the call's own lines are
indented by four spaces, so no line of the call can look like it), and `rows` says how many
terminal rows the layout takes at a width; the caller compares it with what its terminal shows
at once and refuses to ask for a call that does not fit (`bxctl approve` pages it instead).

On a terminal every line of the question is marked (`marked`): an SGR reset, then a
reverse-video cell, a thing the model's text (escaped: no ESC reaches the terminal) cannot draw.
So a fake question drawn by a reply is told from brokerd's at a glance (issue 37 item 5).
"""

from __future__ import annotations

import unicodedata

from boxmaker.proto.broker import HeldCall

from .escape import one_line, visible

MARK = "\x1b[0;7m \x1b[0m "  # reset, one reverse-video cell, reset: never in escaped text
INDENT = "    "  # the call's own lines; ours are indented by two


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def call_lines(text: str) -> list[str]:
    """The lines of `text` (escaped) as shown: indented, runs of two or more blank lines (or
    lines of spaces) collapsed into one line saying how many."""
    shown = visible(text).text
    out: list[str] = []
    blank = 0

    def flush() -> None:
        nonlocal blank
        if blank == 1:
            out.append("")
        elif blank:
            out.append(f"  ~ [{_count(blank, 'blank line', 'blank lines')}]")
        blank = 0

    for line in shown.split("\n") if shown else ["(nothing)"]:
        if not line.strip():
            blank += 1
            continue
        flush()
        out.append(INDENT + line)
    flush()
    return out


def size_note(text: str) -> str:
    """`N lines, M characters` of the call as brokerd sent it."""
    lines = text.count("\n") + 1 if text else 0
    return f"{_count(lines, 'line', 'lines')}, {_count(len(text), 'character', 'characters')}"


def choices(held: HeldCall) -> str:
    """The answers offered: no `[a]lways` when it would add no grant."""
    return "[y]es / [n]o / [a]lways" if held.always else "[y]es / [n]o"


def wait_note(wait_ms: int | None) -> str:
    if wait_ms is None:
        return ""
    return f" (brokerd denies it unanswered in {max(1, round(wait_ms / 1000))} s)"


def question(held: HeldCall, wait_ms: int | None) -> str:
    return f"approve {one_line(held.tool)}? {choices(held)}{wait_note(wait_ms)}: "


def layout_lines(held: HeldCall) -> list[str]:
    """The question's lines above the question itself (no newlines)."""
    tool = one_line(held.tool)
    shown = visible(held.summary)
    note = size_note(held.summary)
    if shown.escaped:
        note += (
            f"; {shown.escaped} control, format or invisible characters shown as \\xNN / "
            "\\uNNNN, and each backslash as \\\\"
        )
    lines = [f"[approval] brokerd holds a call of {tool}: {note}", "  the whole call:"]
    lines += call_lines(held.summary)
    if held.reason:
        lines += ["  it asks because:", *call_lines(held.reason)]
    if held.always:
        lines += ['  "always" would add this grant:', *call_lines(held.always.rstrip("\n"))]
    else:
        lines += ['  "always" adds no grant:', *call_lines(held.no_always)]
    return lines


def layout(held: HeldCall, *, marked: bool = False, wait_ms: int | None = None) -> str:
    """The whole question as written to the owner's terminal, ending in the question."""
    mark = MARK if marked else ""
    head = "".join(f"{mark}{line}\n" for line in layout_lines(held))
    return f"{head}{mark}{question(held, wait_ms)}"


def width(line: str) -> int:
    """Terminal cells `line` takes: two for East Asian wide and full-width characters."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def rows(held: HeldCall, cols: int) -> int:
    """Terminal rows the question takes at `cols` columns, long lines wrapped."""
    cols = max(1, cols)
    lines = [*layout_lines(held), question(held, 120_000)]
    return sum(max(1, -(-(width(line) + 2) // cols)) for line in lines)
