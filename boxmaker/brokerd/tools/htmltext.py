"""HTML to readable text with the standard library's tokenizer (html.parser). [core]

Scripts, styles, templates and other non-text elements are dropped with everything in them;
block elements end a line; runs of white space collapse, except inside <pre>, whose lines and
indentation are kept as they are; a table row is one line, its cells separated by " | "; link
targets are kept after the text (the model may want to follow them). The stdlib's parser is
kept with CPython, is tolerant of broken markup and adds no dependency to the broker
(docs/decisions/sandbox.md, "fetch").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser

DROP = frozenset({"script", "style", "template", "noscript", "svg", "math", "iframe", "object"})
BLOCK = frozenset(
    {"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header"}
    | {"footer", "nav", "aside", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote"}
    | {"hr", "dt", "dd", "form", "main", "figure", "figcaption", "title"}
)
VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "wbr"})
CELL = frozenset({"td", "th"})
CELL_SEP = " | "
_SPACES = re.compile(r"[ \t\r\f\v]+")
# Inside <pre>, white space is carried through the collapse as private-use characters (any in
# the page itself are dropped first), then put back.
_KEPT = {" ": "\ue000", "\t": "\ue001", "\n": "\ue002"}
_KEEP = str.maketrans({**_KEPT, "\ue000": None, "\ue001": None, "\ue002": None, "\r": None})
_PUT_BACK = str.maketrans({v: k for k, v in _KEPT.items()})
# Outside it a newline in the source is white space like any other (a browser's rule).
_PRIVATE = str.maketrans({"\ue000": None, "\ue001": None, "\ue002": None, "\n": " "})


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.dropping: list[str] = []  # the open elements whose content is dropped
        self.href: str | None = None
        self.pre = 0  # open <pre> elements
        self.cells = 0  # cells begun in the current table row

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in DROP and tag not in VOID:
            self.dropping.append(tag)
        if self.dropping:
            return
        if tag in BLOCK:
            self.parts.append("\n")
        if tag == "pre":
            self.pre += 1
        if tag == "tr":
            self.cells = 0
        if tag in CELL:
            self.parts.append(CELL_SEP if self.cells else "")
            self.cells += 1
        if tag == "li":
            self.parts.append("- ")
        if tag == "a":
            self.href = dict(attrs).get("href")

    def handle_endtag(self, tag: str) -> None:
        if self.dropping:
            if tag == self.dropping[-1]:
                self.dropping.pop()
            elif tag in self.dropping:  # a missing end tag inside: close up to this one
                del self.dropping[self.dropping.index(tag) :]
            return
        if tag == "a" and self.href and self.href.startswith(("http://", "https://")):
            self.parts.append(f" <{self.href}>")
            self.href = None
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.dropping:
            if self.pre and self.parts and self.parts[-1] == "\n" and data.startswith("\n"):
                data = data[1:]  # a newline right after <pre> is not content (HTML's rule)
            self.parts.append(data.translate(_KEEP) if self.pre else data.translate(_PRIVATE))


CHUNK = 8192  # fed at a time: the parser's slow spellings cost per feed, checked between
MAX_PENDING = 64 << 10  # unparsed markup held (an unclosed tag or comment): past it, stop
MAX_CLOSE = 4096  # the unparsed tail close() may parse; a longer one is left out


def html_to_text(html: str, out_of_time: Callable[[], bool] | None = None) -> str:
    """The readable text of an HTML document, one block a line, no blank-line runs.

    html.parser is super-linear on some markup (20 KB of `<a <a <a ...` took 20 s on 3.11, an
    unclosed comment's repeats 12 s for 80 KB), in `feed` and in `close`: it is fed a chunk at
    a time and stops when `out_of_time()` says so or when the markup it holds unparsed (an
    unclosed construct) passes MAX_PENDING, and `close` parses a tail of MAX_CLOSE at most;
    the text says what was not read (docs/decisions/mcp-untrusted-input.md)."""
    parser = _Text()
    left = 0
    for start in range(0, len(html), CHUNK):
        if out_of_time is not None and start and out_of_time():
            left = len(html) - start
            break
        parser.feed(html[start : start + CHUNK])
        if len(parser.rawdata) > MAX_PENDING:
            left = len(html) - start - CHUNK
            break
    pending = len(parser.rawdata)
    if pending <= MAX_CLOSE:
        parser.close()
    left += pending if pending > MAX_CLOSE else 0
    text = _lines(parser.parts)
    if left > 0:
        text += f"\n[the rest of the page ({left} characters) was not read: its HTML took too "
        text += "long to turn into text]"
    return text


def _lines(parts: list[str]) -> str:
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(parts).split("\n"))
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip().translate(_PUT_BACK).strip("\n")
