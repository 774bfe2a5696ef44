"""A terminal screen for what the chat writes, enough to see where text lands: printable
characters with auto-wrap at the width, CR, LF (as the pty's onlcr makes it: CR LF), and the
ECMA-48 controls the renderer uses (CUU `ESC[nA`, CUD `ESC[nB`, EL `ESC[2K`). Anything else is
refused, so a test cannot pass on a control this model does not know."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"\x1b\[(\d*)([ABK])")


class Screen:
    def __init__(self, width: int) -> None:
        self.width = width
        self.rows: list[list[str]] = [[]]
        self.row = 0
        self.col = 0

    def _line(self) -> list[str]:
        while len(self.rows) <= self.row:
            self.rows.append([])
        return self.rows[self.row]

    def feed(self, text: str) -> None:
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\x1b":
                found = _CONTROL.match(text, i)
                if found is None:
                    raise ValueError(f"a control the screen does not model: {text[i : i + 8]!r}")
                n, op = int(found.group(1) or 1), found.group(2)
                if op == "A":
                    self.row = max(0, self.row - n)
                elif op == "B":
                    self.row += n
                else:  # EL 2: the whole line
                    self._line().clear()
                i = found.end()
                continue
            if ch == "\r":
                self.col = 0
            elif ch == "\n":
                self.row, self.col = self.row + 1, 0
            elif ch.isprintable():
                if self.col == self.width:  # auto-wrap (DECAWM) before the next character
                    self.row, self.col = self.row + 1, 0
                line = self._line()
                line.extend(" " * (self.col - len(line)))
                if self.col < len(line):
                    line[self.col] = ch
                else:
                    line.append(ch)
                self.col += 1
            else:
                raise ValueError(f"a character the screen does not model: {ch!r}")
            i += 1

    def lines(self) -> list[str]:
        return ["".join(row).rstrip() for row in self.rows]
