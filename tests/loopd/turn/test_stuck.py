"""After a round in which no call ran (turn.stuck, issue 40.2): the turn gets a user record with
the next step (the change owed, the first read, or the answer), only with `[loop] nudge` on,
within the turn's nudges; the cases are the tool model's own (verify-device's read_file check,
port-change, typo, phone-copy, guest-count, dentist)."""

from __future__ import annotations

import pytest

from boxmaker.loopd.turn.nudge import NUDGES_PER_TURN, is_nudge
from boxmaker.loopd.turn.stuck import NUDGE_ANSWER, stuck
from boxmaker.proto import Assistant, ResultClass, ToolCall, ToolResult, User
from boxmaker.proto.log import LogRecord
from tests.support.nudge_turn import START, T, completion, drive, users

HELD = "not run: I asked for no note. Answer me now from what notes.txt holds."
AGAIN = "not run: this call repeats an earlier call of this turn"
MISSED = "error: server.conf: old text not found; no line is near it."


def answered(message: str, *calls: tuple[str, str, str]) -> list[LogRecord]:
    """The owner's message, then each (tool, arguments, result) answered in a round of its own."""
    out: list[LogRecord] = [START, User(T, message)]
    for i, (tool, args, result) in enumerate(calls):
        call = ToolCall(f"c{i}", tool, args)
        out += [Assistant(T, None, None, (call,)),
                ToolResult(T, i, call.id, result, ResultClass.PUBLIC, False, False)]  # fmt: skip
    return out


def read(path: str, text: str) -> tuple[str, str, str]:
    return ("read_file", f'{{"path": "{path}"}}', text)


CASES = [
    pytest.param(  # verify-device's read_file check: the code noted three times, no answer
        "Read the file notes.txt and tell me the locker code written in it.",
        [read("notes.txt", "The locker code is 2193.\n"),
         ("note", '{"text": "The locker code is 2193."}', HELD)],
        NUDGE_ANSWER, id="read-then-note"),
    pytest.param(  # port-change: the edit missed, then the same read again and again
        "change the port in server.conf to 9090",
        [("edit_file", '{"path": "server.conf", "old": "port = 8080"}', MISSED),
         read("server.conf", "name=garage\nport=8080\n"), read("server.conf", AGAIN)],
        "Now call write_file on server.conf with its whole new text.", id="port-change"),
    pytest.param(  # typo: the owner quoted the old text and the new, and the file holds it once
        "there's a typo in draft.txt, 'recieve' should be 'receive' - fix it",
        [read("draft.txt", "Hi Sam,\nI will recieve the parcel.\n"), read("draft.txt", AGAIN)],
        'Call edit_file with {"path": "draft.txt", "old": "recieve", "new": "receive"}.',
        id="typo"),
    pytest.param(  # a write of the copy held before its source was read
        "copy the phone number from contact.txt into phone.txt",
        [("write_file", '{"path": "phone.txt"}', "not run: you have not read contact.txt")],
        'Call read_file with {"path": "contact.txt"}.', id="phone-copy"),
    pytest.param(  # guest-count: the names written, then the count noted (held)
        "count the guests in guests.txt (one per line) and save the number in count.txt",
        [read("guests.txt", "Ada\nBo\n"), ("write_file", "{}", "wrote count.txt: 6 bytes"),
         ("note", '{"text": "2 guests"}', HELD)],
        "Now call write_file on count.txt with its whole new text.", id="guest-count"),
    pytest.param(  # port-change: the edit held until server.conf is read; never a whole write
        "change the port in server.conf to 9090",  # of a file it has not seen
        [("edit_file", '{"path": "server.conf"}', "not run: you have not read server.conf")],
        'Call read_file with {"path": "server.conf"}.', id="port-change-unread"),
    pytest.param(  # a new file: its failed read counts, and the write is asked for
        "add the line 'done' to log.txt",
        [read("log.txt", "error: log.txt: no such file or folder"), read("log.txt", AGAIN)],
        "Now call write_file on log.txt with its whole new text.", id="new-file"),
    pytest.param(  # dentist: the workspace listed, then a note again: the folder it names
        "which of my notes mentions the dentist?",
        [("list_dir", '{"path": "."}', "1 file (1 .txt), 2 folders:\na.txt\nbills/\nnotes/"),
         ("note", '{"text": "dentist"}', HELD)],
        'Call list_dir with {"path": "notes/"}.', id="dentist-folder"),
    pytest.param(  # then the files the listing showed, unread
        "which of my notes mentions the dentist?",
        [("list_dir", '{"path": "."}', "1 folder:\nnotes/"),
         ("list_dir", '{"path": "notes"}', "2 files (2 .txt):\nmon.txt\ntue.txt"),
         ("note", '{"text": "dentist"}', HELD)],
        "You have not read notes/mon.txt, notes/tue.txt yet, and the answer may be in them: file "
        "names do not say what a file holds. Call read_file on each, then answer from what they "
        "hold.", id="dentist-files"),
    pytest.param(  # dentist: a note instead of a search, nothing read
        "which of my notes mentions the dentist?",
        [("note", '{"text": "Search for dentist notes"}', HELD)],
        'Call list_dir with {"path": "."}.', id="dentist"),
    pytest.param(  # nothing read, a file named: the read it wants
        "what's the port in config.ini?", [("shell", "{}", "not run: read_file shows it")],
        'Call read_file with {"path": "config.ini"}.', id="unread"),
    pytest.param(  # a question with a change word is answered, not written
        "what did I change in plan.txt?",
        [read("plan.txt", "Paint the shed.\n"), read("plan.txt", AGAIN)],
        NUDGE_ANSWER, id="question"),
]  # fmt: skip


@pytest.mark.parametrize(("message", "calls", "expected"), CASES)
def test_the_next_step_after_a_round_in_which_nothing_ran(
    message: str, calls: list[tuple[str, str, str]], expected: str
) -> None:
    records = answered(message, *calls)
    said = stuck(records)
    assert said == expected
    assert is_nudge(User(T, said))  # the turn's rules know it is not the owner's


def test_no_nudge_when_a_call_of_the_round_ran_or_failed_on_its_own() -> None:
    asked = "change the port in server.conf to 9090"
    assert stuck(answered(asked, read("server.conf", "port=8080\n"))) is None
    assert stuck(answered(asked, ("edit_file", "{}", MISSED))) is None  # its error says what next
    assert stuck(answered(asked)) is None  # no call yet
    both = answered(asked)
    both.append(Assistant(T, None, None, (ToolCall("a", "clock", "{}"),
                                          ToolCall("b", "clock", "{}"))))  # fmt: skip
    both += [ToolResult(T, 0, "a", "12:00", ResultClass.PUBLIC, False, False),
             ToolResult(T, 1, "b", AGAIN, ResultClass.PUBLIC, False, False)]  # fmt: skip
    assert stuck(both) is None


def test_never_the_same_text_twice_and_never_past_the_turns_nudges() -> None:
    records = answered("Read notes.txt and tell me the code.", read("notes.txt", "1"),
                       ("note", "{}", HELD))  # fmt: skip
    assert stuck(records) == NUDGE_ANSWER
    records += [User(T, NUDGE_ANSWER), Assistant(T, None, None, (ToolCall("n", "note", "{}"),)),
                ToolResult(T, 9, "n", AGAIN, ResultClass.PUBLIC, False, False)]  # fmt: skip
    assert stuck(records) is None  # the answer was asked for; nothing else to say
    spent = answered("what's in a.txt?")
    spent += [
        User(T, f'Call read_file with {{"path": "{i}.txt"}}.') for i in range(NUDGES_PER_TURN)
    ]
    spent += [Assistant(T, None, None, (ToolCall("s", "shell", "{}"),)),
              ToolResult(T, 0, "s", "not run: x", ResultClass.PUBLIC, False, False)]  # fmt: skip
    assert stuck(spent) is None


def test_the_loop_asks_for_the_answer_after_a_held_call_only_with_the_nudge_on() -> None:
    """read (the clock here), then a note no one asked for, held: with the nudge on the next
    request ends in the user record asking for the answer, which the model then gives."""
    message = "Read the file notes.txt and tell me the locker code written in it."
    ran, held = ToolCall("c1", "clock", "{}"), ToolCall("c2", "note", '{"text": "1234"}')
    records, requests, done = drive(
        [completion(None, ran), completion(None, held), completion("The code is 1234.")],
        iter(["The locker code is 1234."]), message, nudge=True,
    )  # fmt: skip
    assert users(records) == [message, NUDGE_ANSWER]
    assert requests[2].messages[-1].to_json() == {"role": "user", "content": NUDGE_ANSWER}
    assert done.content == "The code is 1234."
    records, requests, _ = drive(
        [completion(None, ran), completion(None, held), completion("The code is 1234.")],
        iter(["The locker code is 1234."]), message, nudge=False,
    )  # fmt: skip
    assert users(records) == [message]
    assert requests[2].messages[-1].to_json()["role"] == "tool"
