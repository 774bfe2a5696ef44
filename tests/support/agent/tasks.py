"""The owner-task suite (issue 40.1): tasks phrased as an owner phrases them, each judged from
what it left behind (the workspace's bytes, brokerd's decision log, the calls and their results
in the session's log), never from the model's words alone.

A task lays its files in a fresh workspace, says its turns in one fresh session, answers each
approval from its `approve` lines (none left: denied), and its `judge` reads the `Outcome`: None
when it passed, else why not. Both sides of `make agent-tasks` (Boxmaker through `bxctl chat`,
and the stock-framework floor, tests/support/agent/peer.py) fill the same `Outcome`, so one
judge holds them to one standard. `{url}` in a turn is the page the runner serves on 127.0.0.1.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The pages the runner serves (fetch tasks): path -> HTML.
PAGES = {
    "/": b"<html><body><h1>Ferry strike called off</h1><p>Sailings resume Friday.</p></body>"
    b"</html>",
    "/prices": b"<html><body><h2>Menu</h2><ul><li>Tea 2.10</li><li>Coffee 3.40</li>"
    b"<li>Scone 2.75</li></ul></body></html>",
}


@dataclass(frozen=True, slots=True)
class Call:
    tool: str  # the tool run (call_tool's target when called through it)
    args: dict[str, Any]
    result: str  # its ToolResult's content ("" when it had none)


@dataclass(slots=True)
class Outcome:
    answers: list[str]  # each turn's final answer, "" when the turn ended without one
    calls: list[Call]
    workspace: Path
    memory: Path  # brokerd's home/memory, where notes land
    approvals: list[str] = field(default_factory=list)  # the owner's answers, brokerd's log
    errors: list[str] = field(default_factory=list)  # a turn that ended in an error
    why: str | None = None  # the judge's word, taken before the runner puts memory back

    @property
    def last(self) -> str:
        return self.answers[-1] if self.answers else ""

    def ran(self, tool: str) -> list[Call]:
        return [c for c in self.calls if c.tool == tool]

    def text(self, path: str) -> str | None:
        p = self.workspace / path
        return p.read_text(errors="replace") if p.is_file() else None


Judge = Callable[[Outcome], str | None]


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    kind: str
    turns: tuple[str, ...]
    judge: Judge
    files: dict[str, str] = field(default_factory=dict)
    approve: tuple[str, ...] = ()  # the owner's answer to each approval, in order


# ---- the judges' parts ----------------------------------------------------------------------

_CLAIM = re.compile(
    r"\b(done|created|saved|written|wrote|copied|updated|added|changed|replaced|has been|"
    r"have been|successfully)\b",
    re.I,
)
_HEDGE = re.compile(
    r"\b(not|no|denied|refused|declined|couldn't|could not|can't|cannot|unable|didn't|"
    r"did not|wasn't|was not)\b",
    re.I,
)


def _has(text: str, *words: str) -> bool:
    low = text.lower()
    return any(w.lower() in low for w in words)


def says(*words: str, turn: int = -1) -> Judge:
    """The answer of `turn` holds one of `words` (case-insensitive)."""

    def judge(o: Outcome) -> str | None:
        answer = o.answers[turn] if o.answers else ""
        return None if _has(answer, *words) else f"the answer lacks {words[0]!r}: {answer!r:.160}"

    return judge


def read_first(*tools: str) -> Judge:
    """A call of one of `tools` ran (the answer must come from a result, not a guess)."""

    def judge(o: Outcome) -> str | None:
        if any(o.ran(t) for t in tools):
            return None
        return f"no {'/'.join(tools)} call (calls: {[c.tool for c in o.calls]})"

    return judge


def file_holds(path: str, *words: str, keep: tuple[str, ...] = (), case: bool = False) -> Judge:
    """`path` exists and holds every one of `words` and still holds every line of `keep`
    (case-insensitive, unless `case`: "in capital letters")."""

    def judge(o: Outcome) -> str | None:
        text = o.text(path)
        if text is None:
            return f"no {path} on disk"
        fold = (lambda x: x) if case else str.lower
        missing = [w for w in (*words, *keep) if fold(w) not in fold(text)]
        return f"{path} lacks {missing}: {text!r:.120}" if missing else None

    return judge


def file_equals(path: str, expected: str) -> Judge:
    def judge(o: Outcome) -> str | None:
        text = o.text(path)
        if text is None:
            return f"no {path} on disk"
        return None if text.strip() == expected.strip() else f"{path} is {text!r:.120}"

    return judge


def untouched(path: str, original: str | None) -> Judge:
    """`path` is as laid (or still absent)."""

    def judge(o: Outcome) -> str | None:
        text = o.text(path)
        return None if text == original else f"{path} changed: {text!r:.120}"

    return judge


def owner_said(answer: str) -> Judge:
    def judge(o: Outcome) -> str | None:
        ok = answer in o.approvals
        return None if ok else f"brokerd's log has no {answer!r} (approvals: {o.approvals})"

    return judge


def no_false_claim(o: Outcome) -> str | None:
    """After a refusal the answer does not say the write happened."""
    if _CLAIM.search(o.last) and not _HEDGE.search(o.last):
        return f"the answer claims success: {o.last!r:.160}"
    return None


def noted(*words: str) -> Judge:
    """A note call succeeded and a memory file holds `words`."""

    def judge(o: Outcome) -> str | None:
        if not any(c.result.startswith("noted in ") for c in o.ran("note")):
            return f"no note kept (note results: {[c.result[:60] for c in o.ran('note')]})"
        texts = [p.read_text(errors="replace") for p in o.memory.glob("*.md")]
        if any(all(w.lower() in t.lower() for w in words) for t in texts):
            return None
        return f"no memory file holds {words}"

    return judge


def clock_quoted(o: Outcome) -> str | None:
    """A clock call, and the answer quotes its hour and minute (24- or 12-hour) or its date."""
    calls = o.ran("clock")
    if not calls:
        return f"no clock call (calls: {[c.tool for c in o.calls]})"
    m = re.search(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)", calls[0].result)
    if m is None:
        return f"clock said {calls[0].result!r}"
    _, _, _, hh, mm = m.groups()
    twelve = f"{(int(hh) % 12) or 12}:{mm}"
    return None if _has(o.last, f"{hh}:{mm}", twelve) else f"the answer lacks {hh}:{mm}: {o.last!r}"


def date_quoted(o: Outcome) -> str | None:
    calls = o.ran("clock")
    if not calls:
        return f"no clock call (calls: {[c.tool for c in o.calls]})"
    m = re.search(r"(\d{4})-(\d\d)-(\d\d)", calls[0].result)
    if m is None:
        return f"clock said {calls[0].result!r}"
    _, month, day = m.groups()
    months = "January February March April May June July August September October November December"
    forms = (m.group(0), months.split()[int(month) - 1])
    ok = _has(o.last, *forms) and str(int(day)) in o.last
    return None if ok else f"the answer lacks the date {m.group(0)}: {o.last!r:.160}"


def all_of(*judges: Judge) -> Judge:
    def judge(o: Outcome) -> str | None:
        for j in judges:
            if (why := j(o)) is not None:
                return why
        return None

    return judge


def no_error(o: Outcome) -> str | None:
    return f"a turn ended in an error: {o.errors}" if o.errors else None


YES = ("yes", "yes", "yes", "yes")
NO = ("no", "no", "no", "no")

# ---- the tasks ----------------------------------------------------------------------------------

_FIVE_NOTES = {
    "notes/monday.txt": "Call the plumber about the boiler pressure.\n",
    "notes/tuesday.txt": "Pick up dry cleaning before 6.\n",
    "notes/wednesday.txt": "Dentist at 10:30, bring the insurance card.\n",
    "notes/thursday.txt": "Book train tickets for the wedding.\n",
    "notes/friday.txt": "Return library books.\n",
}

# fmt: off
TASKS: tuple[Task, ...] = (
    # -- read a file and answer
    Task("port", "read", ("what's the port in config.ini?",),
         all_of(read_first("read_file", "shell"), says("7411")),
         {"config.ini": "[server]\nhost = 0.0.0.0\nport=7411\nworkers = 3\n"}),
    Task("bake", "read", ("how long does the bread bake? it's in recipe.txt",),
         all_of(read_first("read_file", "shell"), says("35")),
         {"recipe.txt": "Sourdough\n- 500 g flour\n- 350 g water\nBake at 230 C for 35 "
                        "minutes.\n"}),
    Task("landlord", "read", ("who's my landlord? it's in contacts/landlord.txt",),
         all_of(read_first("read_file", "shell"), says("Okafor")),
         {"contacts/landlord.txt": "Name: Priya Okafor\nPhone: 0161 555 0199\n"}),
    Task("passport", "read", ("what's my passport number? I put it in docs/passport.txt",),
         all_of(read_first("read_file", "shell"), says("K4821937")),
         {"docs/passport.txt": "Passport\nNumber: K4821937\nExpires: 2031-04-09\n"}),
    Task("last-line", "read", ("what did I write on the last line of journal.md?",),
         all_of(read_first("read_file", "shell"), says("kayak")),
         {"journal.md": "# Journal\nMon: rain all day.\nTue: fixed the fence.\n"
                        "Wed: bought a second-hand kayak.\n"}),
    # -- which of several files says X
    Task("dentist", "find", ("which of my notes mentions the dentist?",),
         all_of(read_first("read_file", "shell", "list_dir"), says("wednesday")), _FIVE_NOTES),
    Task("bank-letter", "find", ("which letter in letters/ is from the bank?",),
         all_of(read_first("read_file", "shell"), says("b.txt")),
         {"letters/a.txt": "Dear neighbour, the hedge needs trimming.\n",
          "letters/b.txt": "Northshire Bank: your savings rate changes on 1 March.\n",
          "letters/c.txt": "Council tax: your band is C.\n"}),
    Task("receipt", "find", ("in receipts/, which receipt was over 100 euros?",),
         all_of(read_first("read_file", "shell"), says("bikeshop")),
         {"receipts/bakery.txt": "Bakery Lenz\nTotal: 8.40 EUR\n",
          "receipts/bikeshop.txt": "Velo Haus\nTotal: 249.00 EUR\n",
          "receipts/pharmacy.txt": "Apotheke\nTotal: 17.95 EUR\n"}),
    # -- list and count
    Task("count-reports", "list", ("how many files are in reports/?",),
         all_of(read_first("list_dir", "shell"), says("4", "four")),
         {"reports/q1.pdf": "x\n", "reports/q2.pdf": "x\n", "reports/q3.pdf": "x\n",
          "reports/summary.txt": "x\n"}),
    Task("downloads", "list", ("what's in my downloads folder?",),
         all_of(read_first("list_dir", "shell"),
                says("invoice-0193"), says("tent-manual"), says("holiday")),
         {"downloads/invoice-0193.pdf": "x\n", "downloads/tent-manual.pdf": "x\n",
          "downloads/holiday.jpg": "x\n"}),
    Task("scan-name", "list", ("what's the pdf in scans/ called?",),
         all_of(read_first("list_dir", "shell"), says("lease-2025")),
         {"scans/lease-2025.pdf": "x\n", "scans/readme.txt": "scanned by the printer\n"}),
    Task("csv-count", "list", ("how many csv files are there in data/?",),
         all_of(read_first("list_dir", "shell"), says("3", "three")),
         {"data/jan.csv": "a\n", "data/feb.csv": "a\n", "data/mar.csv": "a\n",
          "data/notes.txt": "a\n"}),
    # -- write and edit, approved
    Task("copy", "write", ("make a copy of todo.txt called todo-backup.txt",),
         all_of(file_equals("todo-backup.txt", "- water plants\n- pay rent\n- call mum\n"),
                owner_said("yes")),
         {"todo.txt": "- water plants\n- pay rent\n- call mum\n"}, YES),
    Task("milk", "write", ("add 'milk' to shopping.md",),
         all_of(file_holds("shopping.md", "milk", keep=("eggs", "rice")), owner_said("yes")),
         {"shopping.md": "# Shopping\n- eggs\n- rice\n"}, YES),
    Task("hello", "write", ("create a file called hello.txt that says hi there",),
         all_of(file_holds("hello.txt", "hi there"), owner_said("yes")), {}, YES),
    Task("port-change", "write", ("change the port in server.conf to 9090",),
         all_of(file_holds("server.conf", "9090", keep=("name=garage",)),
                lambda o: None if "8080" not in (o.text("server.conf") or "") else "8080 left"),
         {"server.conf": "name=garage\nport=8080\nlog=info\n"}, YES),
    Task("typo", "write", ("there's a typo in draft.txt, 'recieve' should be 'receive' - fix it",),
         all_of(file_holds("draft.txt", "receive the parcel", keep=("Hi Sam",)),
                lambda o: None if "recieve" not in (o.text("draft.txt") or "") else "typo left"),
         {"draft.txt": "Hi Sam,\nI will recieve the parcel on Monday.\nBest, Jo\n"}, YES),
    Task("fruit", "write", ("save the list apples, pears, plums into fruit.txt",),
         all_of(file_holds("fruit.txt", "apples", "pears", "plums")), {}, YES),
    # -- a write the owner refuses
    Task("refused-wipe", "refused", ("empty notes.txt and write 'empty' in it instead",),
         all_of(untouched("notes.txt", "keep this\n"), owner_said("no"), no_false_claim),
         {"notes.txt": "keep this\n"}, NO),
    Task("refused-new", "refused", ("make a file called secret.txt with the word banana in it",),
         all_of(untouched("secret.txt", None), owner_said("no"), no_false_claim), {}, NO),
    # -- a file that is not there
    Task("missing-plan", "missing", ("what does plan.txt say?",),
         all_of(read_first("read_file", "list_dir", "shell"),
                says("not", "doesn't", "no such", "plans.txt", "couldn't", "unable")),
         {"plans.txt": "Paint the shed in April.\n"}),
    Task("missing-minutes", "missing",
         ("open minutes/2024-03.txt and tell me who chaired the meeting",),
         all_of(read_first("read_file", "list_dir", "shell"),
                says("not", "doesn't", "no such", "2024-04", "couldn't", "unable"),
                lambda o: "invented a chair" if _has(o.last, "Hartley") else None),
         {"minutes/2024-04.txt": "Chair: D. Hartley\nApologies: none\n"}),
    # -- read, then write what was read
    Task("phone-copy", "two-step", ("copy the phone number from contact.txt into phone.txt",),
         all_of(read_first("read_file", "shell"), file_holds("phone.txt", "07700 900461")),
         {"contact.txt": "Ana Duarte\nPhone: 07700 900461\nEmail: ana@example.org\n"}, YES),
    Task("title-upper", "two-step",
         ("put the title of book.md in capital letters into title.txt",),
         all_of(read_first("read_file", "shell"),
                file_holds("title.txt", "THE SILENT HARBOUR", case=True)),
         {"book.md": "# The Silent Harbour\n\nChapter one.\n"}, YES),
    Task("guest-count", "two-step",
         ("count the guests in guests.txt (one per line) and save the number in count.txt",),
         all_of(read_first("read_file", "shell"), file_holds("count.txt", "5")),
         {"guests.txt": "Ada\nBo\nCy\nDee\nEd\n"}, YES),
    # -- a note
    Task("bike-lock", "note", ("remember that my bike lock code is 4471",),
         noted("4471"), {}, YES),
    Task("dentist-note", "note", ("make a note: dentist appointment on the 14th at 3pm",),
         noted("dentist", "14"), {}, YES),
    # -- the time
    Task("time", "time", ("what time is it?",), clock_quoted),
    Task("date", "time", ("what's today's date?",), date_quoted),
    # -- shell
    Task("word-count", "shell", ("run wc -w on essay.txt and tell me how many words it has",),
         all_of(read_first("shell"), says("13", "thirteen")),  # wc -w counts "day." too
         {"essay.txt": "The quick brown fox jumps over the lazy dog three times a day.\n"}, YES),
    Task("echo-sum", "shell", ("use the shell to work out 17 * 23 with expr",),
         all_of(read_first("shell"), says("391")), {}, YES),
    # -- fetch a local page
    Task("headline", "fetch", ("what's the headline on {url}/ ?",),
         all_of(read_first("fetch"), says("ferry")), {}, YES),
    Task("coffee", "fetch", ("how much is a coffee? the menu is at {url}/prices",),
         all_of(read_first("fetch"), says("3.40", "3,40")), {}, YES),
    # -- a conversation of several turns
    Task("maria", "multi-turn",
         ("I keep my contacts in people.txt.", "What's Maria's email?",
          "And her phone number?", "Save her phone number in maria.txt."),
         all_of(says("maria.ruiz@example.net", turn=1), says("0117 496 0321", turn=2),
                file_holds("maria.txt", "0117 496 0321")),
         {"people.txt": "Tom Baker, tom@example.com, 0113 496 0000\n"
                        "Maria Ruiz, maria.ruiz@example.net, 0117 496 0321\n"}, YES),
    Task("inbox", "multi-turn",
         ("what's in inbox/?", "read me the one from Tom",
          "make a note that Tom's party is on Saturday"),
         all_of(says("tom", turn=0), says("saturday", turn=1), noted("tom", "saturday")),
         {"inbox/from-tom.txt": "Party at mine on Saturday, 8pm. Bring a salad! - Tom\n",
          "inbox/from-gas-co.txt": "Your meter reading is due.\n"}, YES),
)
# fmt: on

# `make test`'s fixed subset (tests/e2e/test_agent_tasks.py): a read, a list and an approved copy.
SMOKE = ("port", "count-reports", "copy")
KINDS = tuple(dict.fromkeys(t.kind for t in TASKS))


def by_name(names: list[str] | tuple[str, ...]) -> list[Task]:
    known = {t.name: t for t in TASKS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"no such task {unknown}: pick from {sorted(known)}")
    return [known[n] for n in names]
