"""brokerd's opt-in chat answer (M4 section 8) through a real brokerd: chat.sock exists only when
brokerd's own config turns it on, admits gatewayd's uid alone (a setpriv child here; loopd's uid,
root and others are refused by SO_PEERCRED), and takes `yes` / `no` only, for a held call whose
code it derived and showed, of a tool on the owner's list that is not box-only. Each refusal
changes nothing: the call still waits, and the owner can still answer on the box."""

from __future__ import annotations

import os
import pwd
from typing import Any

import orjson
import pytest

from boxmaker.brokerd.approvals import Held
from boxmaker.brokerd.chat_approvals import CODE_CHARS, CODE_LEN, box_only, code_of
from boxmaker.brokerd.config import ChatApprovals, ConfigError, parse_config
from boxmaker.proto.broker import HeldCall
from tests.support.brokerd.approvals import Call, owner_peek, owner_says
from tests.support.brokerd.rig import BOUND_S, Rig
from tests.support.chat_client import CAN_SETUID, GATEWAYD_UID, Got, as_uid

OWNER = "own0000000000000000000000a"
POST = "pst0000000000000000000000p"
MODES = (("write_file", "ask"), ("edit_file", "ask"), ("note", "ask"), ("read_file", "allow"))
ASKS = "".join(f'\n[[grant]]\ntool = "{tool}"\nmode = "{mode}"\n' for tool, mode in MODES)
needs_setuid = pytest.mark.skipif(not CAN_SETUID, reason="another uid needs root and setpriv")


def chat_sock(rig: Rig) -> str:
    return str(rig.base / "run" / "chat.sock")


def turn_on(rig: Rig, tools: tuple[str, ...] = ("write_file",), **broker: Any) -> None:
    rig.grants_text = ASKS
    rig.broker = {
        "approval_timeout_ms": 120_000,  # the calls here end by an answer, never by the clock
        "chat_approvals": {"enabled": True, "socket": chat_sock(rig),
                           "gatewayd_uid": GATEWAYD_UID, "tools": list(tools)},
        **broker,
    }  # fmt: skip
    rig.start()


def gatewayd(rig: Rig, *frames: tuple[str, dict[str, Any]], uid: int = GATEWAYD_UID) -> Got:
    return as_uid(uid, chat_sock(rig), list(frames), BOUND_S)


def listed(rig: Rig) -> dict[str, dict[str, Any]]:
    [[kind, body]] = gatewayd(rig, ("pending", {}))
    assert kind == "pending", body
    return {c["id"]: c for c in body["calls"]}


def said(rig: Rig, code: str, answer: str, user: str = OWNER) -> tuple[str, Any]:
    body = {"code": code, "answer": answer, "post_id": POST, "user_id": user}
    [[kind, got]] = gatewayd(rig, ("answer", body))
    return kind, got


def approvals(rig: Rig) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in rig.log.read_bytes().splitlines()]
    return [r for r in lines if r["type"] == "approval"]


@needs_setuid
def test_yes_from_the_chat_runs_that_call_and_logs_the_post_and_user(rig: Rig) -> None:
    turn_on(rig)
    call = Call(rig, "write_file", {"path": "a.txt", "content": "hello"})
    call_id = call.wait_needed()["id"]
    shown = listed(rig)[call_id]
    assert shown["summary"] == "write a.txt: 5 bytes (a new file)\nhello"  # what the box shows
    assert shown["box_only"] == ""
    code = shown["code"]
    assert len(code) == CODE_LEN
    assert set(code) <= set(CODE_CHARS)
    assert said(rig, code.upper(), " Yes ") == ("answered", {"id": call_id, "answer": "yes"})
    assert call.result() == "wrote a.txt: 5 bytes"
    [approval] = approvals(rig)
    assert (approval["answer"], approval["mode"]) == ("yes", "allow")
    assert (approval["post_id"], approval["user_id"]) == (POST, OWNER)
    assert rig.daemon is not None
    line = rig.daemon.wait_for_line("chat answer 'yes'")
    assert f"post {POST} user {OWNER} on call {call_id}: taken" in line


@needs_setuid
def test_no_from_the_chat_denies_and_is_logged(rig: Rig) -> None:
    turn_on(rig)
    call = Call(rig, "write_file", {"path": "a.txt", "content": "hello"})
    call_id = call.wait_needed()["id"]  # first: listed() is read before its subscript
    code = listed(rig)[call_id]["code"]
    assert said(rig, code, "no")[0] == "answered"
    assert call.result() == "error: denied: the owner did not approve (no)"
    assert not (rig.workspace / "a.txt").exists()
    [approval] = approvals(rig)
    assert (approval["answer"], approval["mode"], approval["post_id"]) == ("no", "deny", POST)


@needs_setuid
def test_always_a_wrong_code_and_other_words_are_refused_and_the_call_still_waits(
    rig: Rig,
) -> None:
    turn_on(rig)
    call = Call(rig, "write_file", {"path": "a.txt", "content": "hello"})
    call_id = call.wait_needed()["id"]
    code = listed(rig)[call_id]["code"]
    wrong = "".join(CODE_CHARS[(CODE_CHARS.index(c) + 1) % 32] for c in code)
    for word, quoted, why in [
        ("always", code, '"always" is answered on the box only'),
        ("ALWAYS", code, '"always" is answered on the box only'),
        ("a", code, "answer yes or no"),
        ("y", code, "answer yes or no"),
        ("yes please", code, "answer yes or no"),
        ("", code, "answer yes or no"),
        ("yes", wrong, f"no held call has the code {wrong!r}"),
        ("yes", code[:-1], "no held call has the code"),
        ("yes", "", "no held call has the code"),
        ("yes", "üüüüüü", "no held call has the code"),  # not ASCII: refused, not a crash
    ]:
        kind, body = said(rig, quoted, word)
        assert (kind, why in body["message"]) == ("error", True), (word, quoted, body)
    # ids that are not Mattermost ids (a line break, a space) are not logged: refused whole
    for post, user in [("p\nchat answer 'yes'", OWNER), (POST, "own er"), ("", OWNER)]:
        body = {"code": code, "answer": "yes", "post_id": post, "user_id": user}
        [[kind, got]] = gatewayd(rig, ("answer", body))
        assert kind == "error", got
    assert call_id in listed(rig)  # still held: nothing was approved or denied
    assert approvals(rig) == []
    assert owner_says(rig, call_id, "no").kind == "answered"  # the box still answers it
    assert call.result().startswith("error: denied")


@needs_setuid
def test_a_stale_answer_and_another_calls_code_approve_nothing(rig: Rig) -> None:
    turn_on(rig)
    first = Call(rig, "write_file", {"path": "a.txt", "content": "one"})
    first_id = first.wait_needed()["id"]
    first_code = listed(rig)[first_id]["code"]
    assert owner_says(rig, first_id, "no").kind == "answered"  # answered on the box: ended
    first.result()
    kind, body = said(rig, first_code, "yes")  # a late chat answer to the ended call
    assert kind == "error"
    assert "it was answered already (no)" in body["message"]
    again = Call(rig, "write_file", {"path": "a.txt", "content": "one"})  # the very same call
    again_id = again.wait_needed()["id"]
    assert listed(rig)[again_id]["code"] != first_code  # a code is one call's, not its hash's
    other = Call(rig, "write_file", {"path": "b.txt", "content": "two"})
    other_id = other.wait_needed()["id"]
    assert said(rig, first_code, "yes")[0] == "error"  # the old code approves neither
    assert said(rig, listed(rig)[other_id]["code"], "yes")[0] == "answered"
    assert other.result() == "wrote b.txt: 3 bytes"
    assert again_id in listed(rig)  # the other call's yes was not this one's
    assert owner_says(rig, again_id, "no").kind == "answered"
    assert again.result().startswith("error: denied")
    assert not (rig.workspace / "a.txt").exists()


@needs_setuid
def test_a_tool_not_on_the_list_and_a_box_only_tool_are_answered_on_the_box_only(
    rig: Rig,
) -> None:
    turn_on(rig)
    (rig.workspace / "f.txt").write_text("alpha\n")
    edit = Call(rig, "edit_file", {"path": "f.txt", "old": "alpha", "new": "beta"})
    note = Call(rig, "note", {"text": "remember this"})
    for call, why in [(edit, "edit_file is not in [broker.chat_approvals] tools"),
                      (note, "note is answered on the box only")]:  # fmt: skip
        call_id = call.wait_needed()["id"]
        shown = listed(rig)[call_id]
        assert (shown["code"], shown["summary"]) == ("", "")  # no code shown: nothing to quote
        assert why in shown["box_only"]
        derived = code_of(call_id, owner_peek(rig, call_id))  # the code, had one been shown
        kind, body = said(rig, derived, "yes")
        assert kind == "error"
        assert why in body["message"]
        assert owner_says(rig, call_id, "no").kind == "answered"
        assert call.result().startswith("error: denied")
    assert (rig.workspace / "f.txt").read_text() == "alpha\n"
    assert approvals(rig)[0].get("post_id") is None  # the box's answers carry no post


def test_a_call_asked_because_of_taint_is_box_only_whatever_the_list() -> None:
    chat = ChatApprovals("/x/chat.sock", GATEWAYD_UID, ("write_file", "fetch"))
    call = HeldCall("c1", "write_file", "write a.txt", "", "", "", "0" * 64)
    assert box_only(Held(call), chat) == ""
    tainted = HeldCall("c2", "write_file", "write a.txt", "the session read untrusted content",
                       "", "", "0" * 64)  # fmt: skip
    assert "answered on the box only" in box_only(Held(tainted), chat)
    assert code_of("c1", "0" * 64) != code_of("c2", "0" * 64)


@needs_setuid
def test_only_gatewayds_uid_is_served_on_chat_sock(rig: Rig) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    turn_on(rig, loopd_uid=nobody, owner_uid=0)
    st = os.stat(chat_sock(rig))
    assert (st.st_uid, st.st_mode & 0o777) == (GATEWAYD_UID, 0o600)
    assert gatewayd(rig, ("pending", {}))[0][0] == "pending"
    # loopd's uid: the file's mode keeps it out; opened by hand, SO_PEERCRED does
    assert gatewayd(rig, ("pending", {}), uid=nobody) == [["connect failed", "Permission denied"]]
    os.chmod(chat_sock(rig), 0o666)
    assert gatewayd(rig, ("pending", {}), uid=nobody) == [["closed", None]]
    assert rig.daemon is not None
    line = rig.daemon.wait_for_line("refused a connection on chat.sock")
    assert f"peer uid {nobody} is not uid {GATEWAYD_UID}" in line
    for uid in (0, 54323):  # root (brokerd's and the owner's uid here) and anyone else
        assert gatewayd(rig, ("pending", {}), uid=uid) == [["closed", None]]
        rig.daemon.wait_for_line(f"peer uid {uid} is not uid {GATEWAYD_UID}")


def test_off_by_default_there_is_no_chat_socket(rig: Rig) -> None:
    rig.start()
    assert rig.daemon is not None
    assert "chat approvals off" in rig.daemon.wait_for_line("listening on")
    assert sorted(p.name for p in (rig.base / "run").iterdir() if p.is_socket()) == [
        "broker.sock",
        "owner.sock",
    ]


def test_enabled_false_is_off_whatever_the_other_keys_say(rig: Rig) -> None:
    chat = {"socket": chat_sock(rig), "gatewayd_uid": GATEWAYD_UID, "tools": ["write_file"]}
    rig.broker = {"chat_approvals": {"enabled": False, **chat}}
    rig.start()
    assert not os.path.exists(chat_sock(rig))


def test_brokerd_will_not_start_with_gatewayds_uid_equal_to_loopds(rig: Rig) -> None:
    chat = {"socket": chat_sock(rig), "gatewayd_uid": os.geteuid(), "tools": ["write_file"]}
    rig.broker = {"chat_approvals": {"enabled": True, **chat}}
    with pytest.raises(AssertionError, match="is loopd's uid; the chat socket must never admit"):
        rig.start()  # loopd_uid left to its default: brokerd's own, which gatewayd_uid names
    assert rig.daemon is not None
    assert rig.daemon.wait() == 1
    assert not os.path.exists(chat_sock(rig))


def config(chat: dict[str, Any], **broker: Any) -> bytes:
    head = "".join(f'{k} = "{k}"\n' for k in ("socket", "owner_socket", "workspace", "grants",
                                               "home", "log"))  # fmt: skip
    extra = "".join(f"{k} = {v}\n" for k, v in broker.items())
    body = "".join(f"{k} = {orjson.dumps(v).decode()}\n" for k, v in chat.items())
    return f"[broker]\n{head}{extra}\n[broker.chat_approvals]\n{body}".encode()


ON = {"enabled": True, "socket": "run/chat.sock", "gatewayd_uid": 995, "tools": ["write_file"]}


def test_the_switch_in_brokerds_config() -> None:
    assert parse_config(config({}), "/b").chat is None
    assert parse_config(config({**ON, "enabled": False}), "/b").chat is None
    on = parse_config(config(ON, loopd_uid=996), "/b").chat
    assert on == ChatApprovals("/b/run/chat.sock", 995, ("write_file",))


@pytest.mark.parametrize(
    ("chat", "broker", "message"),
    [
        (
            {**ON, "tools": ["write_file", "shell"]},
            {},
            "tools must not name shell: it stays box-only",
        ),
        (
            {**ON, "tools": ["note"]},
            {},
            "must not name note: it stays box-only (it writes the memory file",
        ),
        ({**ON, "tools": []}, {}, "chat_approvals.tools must be a non-empty list of tool names"),
        (
            {**ON, "tools": "write_file"},
            {},
            "chat_approvals.tools must be a non-empty list of tool names",
        ),
        ({**ON, "gatewayd_uid": 996}, {"loopd_uid": 996}, "996 is loopd's uid"),
        (
            {**ON, "gatewayd_uid": -1},
            {},
            "broker.chat_approvals.gatewayd_uid must be an integer from 0 to",
        ),
        ({**ON, "enabled": "yes"}, {}, "broker.chat_approvals.enabled must be true or false"),
        (
            {"enabled": True, "tools": ["write_file"]},
            {},
            "enabled is true, so socket, gatewayd_uid must be set too",
        ),
        ({**ON, "socket": "owner_socket"}, {}, "socket must be a path of its own"),
        ({**ON, "always": True}, {}, "unknown key broker.chat_approvals.always"),
    ],
)
def test_a_bad_switch_is_one_line_naming_the_key(
    chat: dict[str, Any], broker: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as got:
        parse_config(config(chat, **broker), "/b")
    assert message in str(got.value)
    assert "\n" not in str(got.value)
