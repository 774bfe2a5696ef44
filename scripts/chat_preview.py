"""`make run`'s chat until `bxctl chat` exists: one conversation, kept in memory only.

Each line you type is a user turn; the answer streams through the real inference path (loopd's
client, inferproxy, llama-server), with reasoning dimmed and waits shown on one status line.
Nothing is saved: durable sessions and tools arrive with `loopd serve` and `bxctl chat` (M2b).
EOF or /quit ends it.

    python scripts/chat_preview.py --config conf/loopd.local.toml [--no-thinking]
"""

import argparse
import sys
from pathlib import Path

from boxmaker.loopd.config import ConfigError, load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.loopd.llama.types import ChatEvent, ChatRequest
from boxmaker.loopd.turn.records import assistant_message
from boxmaker.proto import (
    ChatMessage,
    ContentEvent,
    ReasoningEvent,
    RetryingEvent,
    ThinkingCappedEvent,
    UserMessage,
    WaitingEvent,
)

DIM, RESET = ("\x1b[2m", "\x1b[0m") if sys.stdout.isatty() else ("", "")


def show(event: ChatEvent) -> None:
    if isinstance(event, ContentEvent):
        print(event.text, end="", flush=True)
    elif isinstance(event, ReasoningEvent):
        print(f"{DIM}{event.text}{RESET}", end="", flush=True)
    elif isinstance(event, WaitingEvent):
        print(f"{DIM}[waiting: {'slot busy' if event.slot_busy else 'server loading'}]{RESET}")
    elif isinstance(event, RetryingEvent):
        print(f"{DIM}[retrying in {event.after_ms} ms: {event.error}]{RESET}")
    elif isinstance(event, ThinkingCappedEvent):
        print(f"{DIM}[thinking capped at {event.tokens} tokens]{RESET}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--no-thinking", action="store_true")
    args = parser.parse_args()
    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(f"chat: {err}", file=sys.stderr)
        return 1
    client = Client(config.inference)
    history: list[ChatMessage] = []
    print("Boxmaker chat preview: in-memory only, no tools yet. /quit or Ctrl-D ends it.")
    while True:
        try:
            line = input("> ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if line == "/quit":
            return 0
        if not line:
            continue
        messages = (*history, UserMessage(line))
        request = ChatRequest(config.inference.slots[0], messages, thinking=not args.no_thinking)
        try:
            done = client.chat_with_retry(request, show)
        except InferError as err:
            print(f"\n[error: {err.describe()}]")
            continue
        print()
        history = [*messages, assistant_message(done)]


if __name__ == "__main__":
    sys.exit(main())
