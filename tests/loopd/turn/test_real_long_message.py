"""One long message on the REAL llama-server (issue 29.3), one 2,048-token slot: counted by the
server's own tokenizer, a message that cannot fit a turn is refused before anything is appended,
with its tokens against what fits, and the session goes on; one that fits alone but not beside
the history has the epoch folded first. (Before: a 100 KB message was appended and every later
turn failed `session_full`, /compact included.)"""

from __future__ import annotations

from boxmaker.proto import CompactingEvent, ContentEvent, ErrorCode, TurnDone, Usage, WireError
from boxmaker.session.verify import verify_session
from tests.support.loopd.real_compact import CompactStack, owner_text

TOO_LONG = [
    "x" * 100_000,
    "The quick brown fox jumps over the lazy dog. " * 400,
    "\u4e2d\u6587" * 8_000,
    "1234567890 " * 2_000,
    "word\n" * 3_000,
]


def test_long_messages_on_the_real_server() -> None:
    with CompactStack() as cs:
        chat = cs.chat("s1")
        assert isinstance(chat.say("Hello, my name is Ada."), TurnDone)
        log = cs.home / "sessions" / "s1" / "0.jsonl"
        for text in TOO_LONG:
            before = log.read_bytes()
            out = chat.say(text)
            assert isinstance(out, WireError), out
            assert out.code == ErrorCode.BAD_REQUEST
            tokens = len(chat.client.tokenize(text))
            assert f"this message is {tokens:,} tokens" in out.message, out.message
            assert log.read_bytes() == before, "the refused message was appended"
        assert isinstance(chat.say(owner_text(1)), TurnDone)  # the session goes on
        for i in range(2, 5):
            assert isinstance(chat.say(owner_text(i)), TurnDone)
        # Fits alone, not beside the history: sized by the server's tokenizer.
        c = chat.config.compact
        usage = [r for r in chat.log.records if isinstance(r, Usage)][-1]
        used = usage.cache_n + usage.prompt_n + usage.predicted_n
        assert used < c.at * 2048, used  # not due: the fold below is the message's
        unit = "Please remember the list of harbours. "
        n = 1
        while used + len(chat.client.tokenize(unit * n)) < c.at * 2048:
            n += 4
        out = chat.say(unit * n)
        kinds = [type(e) for e in chat.events]
        assert CompactingEvent in kinds, (out, kinds)
        first_content = kinds.index(ContentEvent) if ContentEvent in kinds else len(kinds)
        assert kinds.index(CompactingEvent) < first_content
        assert isinstance(out, TurnDone | WireError), out
        assert verify_session(cs.home, "s1").ok
