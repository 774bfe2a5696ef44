"""The nudge rule (issue 40.2, turn.nudge) and the held calls (turn.hold) in the sans-IO turn
loop: advice with no call, a claimed write no result shows, an answer given unread gets a logged
user message and one more completion; at most two a turn, never the same text twice,
never past tool_iterations, never with `[loop] nudge` off; and the log it leaves replays to the
very request the loop sent (the cache sees an ordinary message)."""

from __future__ import annotations

import pytest

from boxmaker.loopd.tools.registry import CLOCK_SCHEMA, RegisteredTool, Registry
from boxmaker.loopd.turn.hold import after_repeat, hold, read_first
from boxmaker.loopd.turn.limits import REPEATED_NOTE, LoopLimits
from boxmaker.loopd.turn.loop import Append, Complete, Done, RunTools, TurnLoop
from boxmaker.loopd.turn.nudge import (
    NUDGE_ADVICE,
    NUDGE_CLAIM,
    NUDGE_INTENT,
    is_nudge,
    nudge,
    wanted,
)
from boxmaker.proto import (
    Assistant,
    ResultClass,
    ToolCall,
    ToolResponse,
    ToolResult,
    ToolSchema,
    TurnDone,
    User,
)
from boxmaker.proto.log import LogRecord
from boxmaker.session.replay import request_messages
from tests.support.nudge_turn import START, WRITE, T, completion, drive, users
from tests.support.turn import Ticker, baseline

ADVICE = "You can use the `read_file` function to read config.ini. Here's how: ..."
CLAIM = "I have written the upper-cased text to b.txt."


def test_advice_with_no_call_gets_one_nudge_then_the_turn_goes_on() -> None:
    call = ToolCall("c1", "clock", "{}")
    records, requests, done = drive(
        [completion(ADVICE), completion(None, call), completion("It is noon.")],
        iter(["2026-11-30T12:00:00Z"]), content="what time is it?", nudge=True,
    )  # fmt: skip
    assert users(records) == ["what time is it?", NUDGE_ADVICE]
    assert requests[1].messages[-1].to_json() == {"role": "user", "content": NUDGE_ADVICE}
    assert done.content == "It is noon."


def test_two_nudges_a_turn_each_a_different_text_then_it_ends() -> None:
    """The call it wants first (config.ini is named), then the advice text; a third advice ends
    the turn with the model's own answer."""
    records, requests, done = drive([completion(ADVICE)] * 3, nudge=True)
    first = wanted("what's the port in config.ini?")
    assert users(records) == ["what's the port in config.ini?", first, NUDGE_ADVICE]
    assert len(requests) == 3
    assert done.content == ADVICE
    records, requests, done = drive([completion(ADVICE)] * 2, content="what time?", nudge=True)
    assert users(records) == ["what time?", NUDGE_ADVICE]  # one text fits: never twice
    assert len(requests) == 2


def test_a_claimed_write_with_no_write_result_is_nudged() -> None:
    call = ToolCall("c1", "clock", "{}")
    records, _, done = drive(
        [completion(None, call), completion(CLAIM), completion("Not done yet, sorry.")],
        iter(["2026-11-30T12:00:00Z"]), "copy a.txt upper-cased to b.txt", nudge=True,
    )  # fmt: skip
    assert users(records)[-1] == NUDGE_CLAIM
    assert done.content == "Not done yet, sorry."


def test_a_claim_is_not_nudged_when_the_owner_asked_only_to_look() -> None:
    """verify-device's list_dir check with the nudge on: the listing's answer read as a claim,
    and the model edited and noted to make it true."""
    call = ToolCall("c1", "list_dir", '{"path": "box"}')
    answer = "Here are the files saved in the folder box: apple-123.txt, pear.txt."
    records, _, done = drive(
        [completion(None, call), completion(answer)], iter(["apple-123.txt\npear.txt"]),
        "List the files in the folder box.", nudge=True,
    )  # fmt: skip
    assert not any(is_nudge(r) for r in records)
    assert done.content == answer


def test_a_claim_the_write_result_supports_ends_the_turn() -> None:
    call = ToolCall("c1", "write_file", '{"path": "b.txt"}')
    records, _, done = drive(
        [completion(None, call), completion(CLAIM)], iter(["wrote b.txt: 5 bytes"]),
        "save hello in b.txt", nudge=True,
    )  # fmt: skip
    assert not any(is_nudge(r) for r in records)
    assert done.content == CLAIM


def test_off_by_default_and_within_the_tool_rounds() -> None:
    records, _, done = drive([completion(ADVICE)])  # [loop] nudge off: as before
    assert users(records) == ["what's the port in config.ini?"]
    call = ToolCall("c1", "clock", "{}")
    # One round allowed, spent by the call: the claim ends the turn un-nudged.
    records, _, done = drive(
        [completion(None, call), completion(CLAIM)], iter(["noon"]), nudge=True,
        tool_iterations=1,
    )  # fmt: skip
    assert not any(is_nudge(r) for r in records)
    assert done.content == CLAIM


def test_what_is_nudged_and_what_is_not() -> None:
    asked = "copy a.txt upper-cased to b.txt"
    owner: list[LogRecord] = [START, User(T, asked)]
    plain: list[LogRecord] = [START, User(T, "make the backup copy")]  # no file named
    assert nudge(plain, "I cannot read files from the workspace.") == NUDGE_ADVICE
    assert nudge(plain, "```bash\ncat a.txt\n```") == NUDGE_ADVICE
    # the call it wants comes before the advice text: it names the file and the tool
    assert nudge(owner, "I cannot read files from the workspace.") == wanted(asked)
    assert nudge(owner, "The port is 7411.") == wanted("copy a.txt upper-cased to b.txt")
    assert nudge([START, User(T, "what time is it?")], "It is noon.") is None
    assert nudge(owner, "Done: b.txt has been created.") == NUDGE_CLAIM
    assert nudge(plain, "The file was not written: you denied it.") is None
    assert nudge(plain, "b.txt has not been written, since you said no.") is None
    denied = ToolCall("w", "write_file", '{"path": "b.txt"}')
    refused: list[LogRecord] = [*owner, Assistant(T, None, None, (denied,)),
               ToolResult(T, 0, "w", "error: denied: the owner did not approve", ResultClass.PUBLIC,
                          False, False)]  # fmt: skip
    assert nudge(refused, "I have written b.txt.") == NUDGE_CLAIM  # a denial supports nothing
    assert nudge(refused, "I can't: you did not approve the write.") is None  # a call was made
    nudged: list[LogRecord] = [*owner, User(T, NUDGE_ADVICE)]
    assert nudge(nudged, ADVICE) == wanted("copy a.txt upper-cased to b.txt")  # another text
    twice: list[LogRecord] = [*nudged, User(T, NUDGE_CLAIM)]
    assert nudge(twice, ADVICE) is None  # two a turn


def test_the_log_with_a_nudge_replays_to_the_request_sent() -> None:
    """The nudge is an ordinary user record: the messages replayed from the log (a resumed
    session's next request) start with every request of the turn, byte for byte."""
    call = ToolCall("c1", "clock", "{}")
    records, requests, _ = drive(
        [completion(ADVICE), completion(None, call), completion("It is noon.")],
        iter(["2026-11-30T12:00:00Z"]), nudge=True,
    )  # fmt: skip
    replayed = [m.to_json() for m in request_messages(baseline(), [START, *records])]
    for request in requests:
        sent = [m.to_json() for m in request.messages]
        assert replayed[: len(sent)] == sent
    said = wanted("what's the port in config.ini?")
    assert {"role": "user", "content": said} in replayed


@pytest.mark.parametrize(
    ("message", "named", "tool"),
    [
        ("what's the port in config.ini?", "config.ini", "read_file"),
        ("I put it in docs/passport.txt, what's the number", "docs/passport.txt", "read_file"),
        ("how many reports are in reports/?", "reports/", "list_dir"),
        ("read ./notes/plan.md.", "./notes/plan.md", "read_file"),
        (
            "headline of http://127.0.0.1:8080/news.html?",
            "http://127.0.0.1:8080/news.html",
            "fetch",
        ),
        ("what time is it?", None, None),
        ("what's 1.5 times 3.25?", None, None),
        ("e.g. say hi, i.e. be nice", None, None),
        ("write to bob@example.com", None, None),
    ],
)
def test_a_message_that_names_something_to_read_is_nudged_when_nothing_was_called(
    message: str, named: str | None, tool: str | None
) -> None:
    """The unread rule: "what's the port in config.ini?" answered with no call (Qwen2.5-Coder:
    "The port is specified in the config.ini file under the [server] section.")."""
    said = nudge([START, User(T, message)], "It is in there somewhere.")
    if named is None:
        assert said is None
    else:
        assert said == wanted(message)
        assert said is not None
        arg = "url" if tool == "fetch" else "path"
        assert said == f'Call {tool} with {{"{arg}": "{named}"}}.'


def _turn(message: str, *calls: ToolCall) -> list[LogRecord]:
    """The owner's message, then each call answered."""
    out: list[LogRecord] = [START, User(T, message)]
    for c in calls:
        out += [Assistant(T, None, None, (c,)), ToolResult(T, 0, c.id, "ok", ResultClass.PUBLIC,
                False, False)]  # fmt: skip
    return out


def test_a_read_asked_beside_the_write_does_not_count() -> None:
    """Qwen2.5-Coder asked read_file and write_file in one completion: the write's text was
    made before the read's result came, so it is not run."""
    read = ToolCall("r", "read_file", '{"path": "todo.txt"}')
    write = ToolCall("w", "write_file", '{"path": "b.txt", "content": "Copy of todo.txt"}')
    records: list[LogRecord] = [START, User(T, "copy todo.txt to b.txt"),
                                Assistant(T, None, None, (read, write))]  # fmt: skip
    said = read_first(records, write.name, write.arguments)
    assert said is not None
    assert said.startswith("not run: you have not read todo.txt in this turn.")


@pytest.mark.parametrize(
    ("message", "done", "call", "source"),
    [
        ("copy todo.txt to todo-backup.txt", (), ("write_file", "todo-backup.txt"), "todo.txt"),
        ("copy todo.txt to todo-backup.txt", (), ("edit_file", "./Todo-Backup.txt"), "todo.txt"),
        ("put the phone in a.txt into b/c.txt", (), ("write_file", "b/c.txt"), "a.txt"),
        ("copy a.txt to b.txt", (("list_dir", "."),), ("write_file", "b.txt"), "a.txt"),
        ("copy a.txt to b.txt", (("read_file", "a.txt"),), ("write_file", "b.txt"), None),
        ("copy a.txt to b.txt", (("read_file", "./A.TXT"),), ("write_file", "b.txt"), None),
        ("write hi to a.txt and b.txt", (), ("write_file", "a.txt"), None),
        ("write hi to a.txt and b.txt", (("write_file", "a.txt"),), ("write_file", "b.txt"), None),
        ("write hi to notes.txt", (), ("write_file", "notes.txt"), None),
        ("update card.txt from contacts.txt", (), ("write_file", "card.txt"), "card.txt"),
        (
            "update card.txt from contacts.txt",
            (("read_file", "card.txt"),),
            ("write_file", "card.txt"),
            None,
        ),
        # asked to change a file that is there: its own text first
        (
            "change the port in server.conf to 9090",
            (),
            ("write_file", "server.conf"),
            "server.conf",
        ),
        ("change the port in server.conf to 9090", (), ("edit_file", "server.conf"), "server.conf"),
        (
            "change the port in server.conf to 9090",
            (("read_file", "server.conf"),),
            ("write_file", "server.conf"),
            None,
        ),
        ("add 'milk' to shopping.md", (), ("write_file", "shopping.md"), "shopping.md"),
        ("there's a typo in draft.txt - fix it", (), ("edit_file", "draft.txt"), "draft.txt"),
        # asked to make one: nothing to read
        (
            "create a file called hello.txt that says hi there",
            (),
            ("write_file", "hello.txt"),
            None,
        ),
        ("save the list apples, pears into fruit.txt", (), ("write_file", "fruit.txt"), None),
        ("copy a.txt to b.txt", (), ("write_file", "other.txt"), None),
        ("copy a.txt to b.txt", (), ("read_file", "b.txt"), None),
    ],
)
def test_a_write_before_its_named_source_was_read_is_not_run(
    message: str,
    done: tuple[tuple[str, str], ...],
    call: tuple[str, str],
    source: str | None,
) -> None:
    calls = [ToolCall(f"c{i}", t, f'{{"path": "{p}"}}') for i, (t, p) in enumerate(done)]
    records = _turn(message, *calls)
    tool, path = call
    said = read_first(records, tool, f'{{"path": "{path}", "content": "x"}}')
    wrapped = read_first(
        records, "call_tool", f'{{"name": "{tool}", "arguments": {{"path": "{path}"}}}}'
    )
    assert said == wrapped
    if source is None:
        assert said is None
    else:
        assert said is not None
        assert said.startswith(f"not run: you have not read {source} in this turn.")


def test_the_loop_answers_an_unread_copy_itself_and_runs_it_after_the_read() -> None:
    write = ToolCall("w1", "write_file", '{"path": "b.txt", "content": "Copy of a.txt"}')
    read = ToolCall("r1", "read_file", '{"path": "a.txt"}')
    again = ToolCall("w2", "write_file", '{"path": "b.txt", "content": "HELLO"}')
    loop = TurnLoop(
        baseline=baseline(), records=[START], content="copy a.txt upper-cased to b.txt",
        thinking=False, registry=Registry([RegisteredTool(CLOCK_SCHEMA, True),
        RegisteredTool(WRITE, True), RegisteredTool(ToolSchema("read_file", "Reads.",
        WRITE.parameters), True)]), limits=LoopLimits(nudge=True), clock=Ticker(),
    )  # fmt: skip
    replies = [completion(None, write), completion(None, read), completion(None, again),
               completion("Done.")]  # fmt: skip
    ran: list[str] = []
    results: list[str] = []
    action = loop.start()
    while not isinstance(action, Done):
        result: object = None
        if isinstance(action, Append) and isinstance(action.record, ToolResult):
            results.append(action.record.content)
        if isinstance(action, Complete):
            result = replies.pop(0)
        elif isinstance(action, RunTools):
            ran += [r.tool for r in action.requests]
            result = tuple(ToolResponse("hello" if r.tool == "read_file" else "wrote b.txt",
                           ResultClass.PUBLIC, False, False) for r in action.requests)  # fmt: skip
        action = loop.send(result)
    assert ran == ["read_file", "write_file"]  # the first write never reached brokerd
    assert results[0].startswith("not run: you have not read a.txt in this turn.")
    assert isinstance(action.outcome, TurnDone)


def test_an_edit_whose_old_text_the_owner_wrote_out_runs_unread() -> None:
    """tests/e2e/test_tool_model.py's approved edit: 'replace "flour" with "sugar"' guesses
    nothing, and brokerd refuses an old text the file does not hold."""
    records = _turn('In the file shopping.txt, replace "flour" with "sugar".')
    given = '{"path": "shopping.txt", "old": "flour", "new": "sugar"}'
    assert read_first(records, "edit_file", given) is None
    guessed = '{"path": "shopping.txt", "old": "flour\\nsugar", "new": "sugar"}'
    said = read_first(records, "edit_file", guessed)
    assert said is not None
    assert said.startswith("not run: you have not read shopping.txt")
    rewrite = '{"path": "shopping.txt", "content": "sugar"}'
    assert read_first(records, "write_file", rewrite) is not None


# ---- what else is held, and the nudges a turn with calls gets (issue 40, fifth session) -------


@pytest.mark.parametrize(
    ("message", "command", "instead"),
    [
        ("what's the port in config.ini?", "cat config.ini", ("read_file", "config.ini")),
        ("last line of journal.md?", "tail -1 journal.md", ("read_file", "journal.md")),
        ("what's in reports/?", "ls -la reports/", ("list_dir", "reports/")),
        ("what's here?", "ls", ("list_dir", ".")),
        # seen: the model's own pipeline, which the owner refused
        ("port in config.ini?", "cat config.ini | grep 'port'", ("read_file", "config.ini")),
        ("port in config.ini?", "grep -i port config.ini", ("read_file", "config.ini")),
        (
            "port in config.ini?",
            "cat config.ini | grep port | head -1",
            ("read_file", "config.ini"),
        ),
        ("how long is a.txt?", "cat a.txt | wc -l", None),  # computes something
        ("what's in reports/?", "ls reports/ | grep pdf", None),
        ("port in config.ini?", "cat config.ini || true", None),
        ("port in config.ini?", "cat a.ini b.ini", None),  # two files
        ("port in config.ini?", "cat *.ini", None),  # a glob
        ("port in config.ini?", "cat config.ini > b.ini", None),  # a write
        ("port in config.ini?", "cat $(ls)", None),
        ("port in config.ini?", "sed -n 1p config.ini", None),  # not one of the readers
        ("run cat on config.ini", "cat config.ini", None),  # the owner asked for the command
        ("use the shell to show config.ini", "cat config.ini", None),
        ("what's the port in config.ini?", "cat 'config.ini", None),  # not shell words
    ],
)
def test_a_shell_command_that_only_reads_is_answered_with_the_reader(
    message: str, command: str, instead: tuple[str, str] | None
) -> None:
    """The port task: `cat config.ini` through shell asked the owner, who said no, and the model
    gave up; read_file reads it without asking."""
    records = _turn(message)
    args = '{"command": "' + command.replace("'", "\\u0027") + '"}'
    said = hold(records, "shell", args)
    if instead is None:
        assert said is None
    else:
        tool, path = instead
        assert said == (
            f"not run: {tool} shows {path} without asking the owner, and shell asks them. "
            f'Call {tool} with {{"path": "{path}"}} now.'
        )


@pytest.mark.parametrize(
    ("message", "held"),
    [
        ("which of my notes mentions the dentist?", 'call list_dir with {"path": "."}'),
        ("put the title of book.md in capital letters into title.txt", "about book.md, title.txt"),
        ("what's in todo.txt?", "I asked about todo.txt: use read_file"),
        ("remember that my bike lock code is 4471", None),
        ("make a note: dentist on the 14th", None),
        ("don't forget the milk", None),
    ],
)
def test_a_note_the_owner_did_not_ask_for_is_not_run(message: str, held: str | None) -> None:
    said = hold(_turn(message), "note", '{"text": "x"}')
    if held is None:
        assert said is None
    else:
        assert said is not None
        assert said.startswith("not run: note keeps what I ask you to remember")
        assert held in said
    assert hold(_turn(message), "clock", "{}") is None


def test_a_repeat_names_the_write_while_a_change_asked_for_is_not_made() -> None:
    """port-change and typo: an edit missed, the model read the file three times, and the repeat
    rule ended the turn with the file unchanged."""
    read = ToolCall("r", "read_file", '{"path": "server.conf"}')
    asked = _turn("change the port in server.conf to 9090", read)
    said = after_repeat(asked, read.name, read.arguments)
    assert said.startswith(REPEATED_NOTE)
    assert said.endswith("call edit_file now with old copied exactly from the file's text above, "
                         "or write_file with the whole new text.")  # fmt: skip
    wrote = [*asked, Assistant(T, None, None, (ToolCall("w", "write_file", "{}"),)),
             ToolResult(T, 0, "w", "wrote server.conf: 9 bytes", ResultClass.PUBLIC, False,
                        False)]  # fmt: skip
    assert after_repeat(wrote, read.name, read.arguments) == REPEATED_NOTE
    for question in ("what's the port in server.conf?", "what did I write in server.conf?"):
        assert after_repeat(_turn(question, read), read.name, read.arguments) == REPEATED_NOTE


def test_a_repeat_of_a_call_that_failed_says_it_fails_again() -> None:
    """last-line: read_file with offset -1, refused, sent twice more; dentist: a held note,
    twice more."""
    bad = ToolCall("r", "read_file", '{"path": "journal.md", "offset": -1}')
    records: list[LogRecord] = [START, User(T, "what did I write on the last line of journal.md?"),
        Assistant(T, None, None, (bad,)),
        ToolResult(T, 0, "r", "error: denied: bad request: read_file: offset cannot be negative",
                   ResultClass.PUBLIC, False, False)]  # fmt: skip
    said = after_repeat(records, bad.name, bad.arguments)
    assert said == (
        f"{REPEATED_NOTE} It did not run the first time and will not now: do what its answer "
        "says instead."
    )
    good = _turn("what did I write on the last line of journal.md?", bad)  # its result: "ok"
    assert after_repeat(good, bad.name, bad.arguments) == REPEATED_NOTE


def test_the_loop_adds_the_next_step_to_a_repeat_only_with_the_nudge_on() -> None:
    read = ToolCall("r1", "clock", "{}")
    again = ToolCall("r2", "clock", "{}")
    for on in (True, False):
        records, _, _ = drive(
            [completion(None, read), completion(None, again), completion("It is noon.")],
            iter(["noon"]), "change the time in a.txt", nudge=on,
        )  # fmt: skip
        repeat = [r.content for r in records if isinstance(r, ToolResult)][1]
        assert (repeat == REPEATED_NOTE) is not on
        assert repeat.startswith(REPEATED_NOTE)


def _answered(message: str, *calls: tuple[str, str, str]) -> list[LogRecord]:
    """The owner's message, then each (tool, arguments, result) answered."""
    out: list[LogRecord] = [START, User(T, message)]
    for i, (tool, args, result) in enumerate(calls):
        call = ToolCall(f"c{i}", tool, args)
        out += [Assistant(T, None, None, (call,)), ToolResult(T, 0, call.id, result,
                ResultClass.PUBLIC, False, False)]  # fmt: skip
    return out


def test_an_answer_before_the_listed_files_were_read_is_nudged_to_read_them() -> None:
    """bank-letter and receipt: list_dir, then an answer from the names, or from the first
    file read ("bakery.txt" for the receipt over 100 euros)."""
    listed = ("list_dir", '{"path": "letters/"}', "3 files (3 .txt):\na.txt\nb.txt\nc.txt")
    content = "which letter in letters/ is from the bank?"
    said = nudge(_answered(content, listed), "The letters are a.txt, b.txt and c.txt.")
    assert said == (
        "You have not read letters/a.txt, letters/b.txt, letters/c.txt yet, and the "
        "answer may be in them: file names do not say what a file holds. Call read_file on "
        "each, then answer from what they hold."
    )
    one = ("read_file", '{"path": "./letters/A.txt"}', "Dear neighbour")
    said = nudge(_answered(content, listed, one), "a.txt is from the bank.")
    assert said is not None
    assert said.startswith("You have not read letters/b.txt, letters/c.txt yet")
    every = [("read_file", f'{{"path": "letters/{n}.txt"}}', "x") for n in "abc"]
    assert nudge(_answered(content, listed, *every), "b.txt is from the bank.") is None
    for message in (
        "which letter in letters/ has the bank's address in it?",
        "one of the letters in letters/ uses the word overdraft. Which one?",
    ):
        said = nudge(_answered(message, listed), "The letters are a.txt, b.txt and c.txt.")
        assert said is not None, message
        assert said.startswith("You have not read letters/a.txt"), message
    for message in ("how many files are in letters/?", "what's the pdf in letters/ called?",
                    "what's in my letters folder?", "what do I have in letters/?"):  # fmt: skip
        assert nudge(_answered(message, listed), "Three: a, b, c.") is None
    many = ("list_dir", '{"path": "."}', "11 files:\n" + "\n".join(f"{i}.txt" for i in range(11)))
    assert nudge(_answered(content, many), "None.") is None  # a search, not a read


def test_a_said_call_that_was_not_sent_is_nudged() -> None:
    """coffee: told to fetch, the model answered "I'll call the `fetch` function on ..."."""
    owner = "how much is a coffee? the menu is at http://127.0.0.1:9/prices"
    first = wanted(owner)
    records: list[LogRecord] = [START, User(T, owner), User(T, str(first))]
    said = nudge(records, "I'll call the `fetch` function on http://127.0.0.1:9/prices to read it.")
    assert said == NUDGE_INTENT
    assert nudge(records, "A coffee is 3.40.") is None  # an answer, not an intent


def test_remember_with_no_call_is_nudged_to_note() -> None:
    said = nudge(_turn("remember that my bike lock code is 4471"), "Write it on paper.")
    assert said == wanted("remember that my bike lock code is 4471")
    assert said is not None
    kept = '{"text": "my bike lock code is 4471"}'
    assert said == f"Call note with {kept}."


def test_every_nudge_is_known_as_one_and_the_owners_words_are_not() -> None:
    """No marker the model reads (a prefix cost the call on the probe), so a nudge is known by
    its opening: every text nudge() writes, and the "[loopd] " of logs written before."""
    listed = ("list_dir", '{"path": "a/"}', "2 files (2 .txt):\na.txt\nb.txt")
    texts = [
        NUDGE_ADVICE,
        NUDGE_CLAIM,
        NUDGE_INTENT,
        wanted("remember: gate code 12"),
        wanted("what's in notes/?"),
        wanted("read http://127.0.0.1:9/x"),
        wanted("see a.md"),
        nudge(_answered("which of a/ says hi?", listed), "a.txt."),
        "[loopd] Do it now.",
    ]
    for text in texts:
        assert text is not None
        assert is_nudge(User(T, text)), text
    for owner in ("Do it yourself.", "Call read_file with {} and tell me", "call note with {}.",
                  "You have not read b.txt, read it", "Nothing was kept?", "[loopd]"):  # fmt: skip
        assert not is_nudge(User(T, owner)), owner
