"""Where `bxctl chat` reads the owner's messages: a line editor on a terminal, lines elsewhere.

On a terminal (stdin and stdout both one) the reader is prompt_toolkit's (the choice and why:
docs/decisions/chat.md): the arrow keys, Home/End, Ctrl-A/E/K/U/W and the rest of Emacs
editing; Up/Down and Ctrl-R through a history kept across runs in one file (0600, created so,
never followed through a symlink); bracketed paste, so a paste of any size, newlines included,
arrives whole as one message (the terminal's 4,095-byte line limit applies only to its cooked
mode, which prompt_toolkit never uses). Multi-line messages: Esc then Enter (or Alt-Enter)
starts a new line, and a message that begins with `\"\"\"` goes on over Enter until a line ends
with `\"\"\"` (Ollama's way); the quotes are not sent.

Ctrl-C with text typed clears it; at an empty prompt it raises KeyboardInterrupt (the chat
quits). Ctrl-R searches the history: Enter accepts the match (it is then at the prompt, to edit
or send with Enter), Ctrl-C or Ctrl-G ends the search. Ctrl-D on an empty line is the end of
input.

Elsewhere (a pipe, a file, `--json`) a message is one line of stdin, as it always was: nothing
is edited, joined or quoted, so scripts see no change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, TextIO

from boxmaker.session.files import FILE_MODE, open_regular

QUOTES = '"""'


class Lines(Protocol):
    def read(self) -> str | None:
        """The next message; None at the end of input. KeyboardInterrupt for Ctrl-C."""
        ...


class PipeLines:
    """One message per line of `stdin`; `prompt` is written before each read when set."""

    def __init__(self, stdin: TextIO, stdout: TextIO, prompt: str = "") -> None:
        self._in = stdin
        self._out = stdout
        self._prompt = prompt

    def read(self) -> str | None:
        if self._prompt:
            self._out.write(self._prompt)
        self._out.flush()
        line = self._in.readline()
        if not line:
            return None
        return line.rstrip("\r\n")


def unquote(text: str) -> str:
    """A `\"\"\"`-quoted message without its quotes (and the newline right inside each)."""
    body = text.strip()
    if body.startswith(QUOTES) and body.endswith(QUOTES) and len(body) >= 2 * len(QUOTES):
        inner = body[len(QUOTES) : -len(QUOTES)]
        return inner.removeprefix("\n").removesuffix("\n")
    return text


def open_quote(text: str) -> bool:
    """Whether a message that began with `\"\"\"` is still waiting for its closing quotes."""
    body = text.strip()
    if not body.startswith(QUOTES):
        return False
    return len(body) < 2 * len(QUOTES) or not body.endswith(QUOTES)


def history_file(path: Path) -> Path:
    """Makes sure `path` is a regular file of ours, mode 0600, and returns it (issue 38 item
    2: by the home-file rules, so a FIFO there cannot hang the chat before its first prompt).

    Raises:
        OSError: it cannot be made (naming the file); SessionError: it is a symlink, a FIFO, a
            device or a folder (session.files.NotARegularFile).
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:  # made 0600 from its first byte, never through a link
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        os.close(os.open(path, flags, FILE_MODE))
    except FileExistsError:
        pass
    fd = open_regular(path)  # read-only: a FIFO opens (and is named as one) without a writer
    try:
        os.fchmod(fd, FILE_MODE)  # one made before (or by another umask) is narrowed too
    finally:
        os.close(fd)
    return path


class TerminalLines:
    """prompt_toolkit's line editor with a history file; see the module's docstring."""

    def __init__(self, history: Path | None, err: TextIO, prompt: str = "> ") -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.filters import is_searching
        from prompt_toolkit.history import History, InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

        from .chat_history import BoundedFileHistory

        bindings = KeyBindings()
        # Not while Ctrl-R searches: there Enter accepts the match (prompt_toolkit's own
        # binding; a second Enter sends it) and Ctrl-C ends the search (issue 39 item 1: the
        # chat's Enter took the search's and left an empty `(reverse-i-search)` prompt).
        editing = ~is_searching

        @bindings.add("enter", filter=editing)
        def _enter(event: KeyPressEvent) -> None:
            buffer = event.current_buffer
            if open_quote(buffer.text):
                buffer.insert_text("\n")
            else:
                buffer.validate_and_handle()

        @bindings.add("escape", "enter", filter=editing)
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        @bindings.add("c-c", filter=editing)
        def _interrupt(event: KeyPressEvent) -> None:
            """With text typed, Ctrl-C clears it (as a shell does); only at an empty prompt is
            the chat told (KeyboardInterrupt): a second Ctrl-C after new text was typed clears
            that text too, never quits with it (issue 39 item 1)."""
            buffer = event.current_buffer
            if buffer.text:
                buffer.reset()
            else:
                event.app.exit(exception=KeyboardInterrupt())

        store: History = InMemoryHistory()
        self._file: BoundedFileHistory | None = None
        self._err = err
        if history is not None:
            store = self._file = BoundedFileHistory(history)
        self._session: PromptSession[str] = PromptSession(
            history=store,
            multiline=False,  # Enter is bound above; a newline is inserted as text
            key_bindings=bindings,
            prompt_continuation=lambda width, line, wrap: "." * (width - 1) + " ",
            enable_history_search=False,
            reserve_space_for_menu=0,  # no completion menu: no blank rows under the prompt
        )
        self._prompt = prompt

    def read(self) -> str | None:
        self._said()
        try:
            text = self._session.prompt(self._prompt)
        except EOFError:
            return None
        finally:
            self._said()
        return unquote(text)

    def _said(self) -> None:
        """The line saying the history file was dropped (issue 38 item 3), once, between
        prompts: never from inside the editor's key handler."""
        if self._file is not None and self._file.dropped:
            self._err.write(self._file.dropped + "\n")
            self._err.flush()
            self._file.dropped = None
