"""HTML to readable text with the standard library's tokenizer (html.parser). [core]

Scripts, styles, templates and other non-text elements are dropped with everything in them;
block elements end a line; runs of white space collapse; link targets are kept after the text
(the model may want to follow them). The stdlib's parser is kept with CPython, is tolerant of
broken markup and adds no dependency to the broker (docs/decisions/sandbox.md, "fetch").
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

DROP = frozenset({"script", "style", "template", "noscript", "svg", "math", "iframe", "object"})
BLOCK = frozenset(
    {"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header"}
    | {"footer", "nav", "aside", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote"}
    | {"hr", "dt", "dd", "form", "main", "figure", "figcaption", "title"}
)
VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "wbr"})
_SPACES = re.compile(r"[ \t\r\f\v]+")


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.dropping: list[str] = []  # the open elements whose content is dropped
        self.href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in DROP and tag not in VOID:
            self.dropping.append(tag)
        if self.dropping:
            return
        if tag in BLOCK:
            self.parts.append("\n")
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
        if tag in BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.dropping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The readable text of an HTML document, one block a line, no blank-line runs."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(parser.parts).split("\n"))
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()
