"""`make verify-device`: the briefs' on-device checks against the upstream of a config.

    python -m boxmaker.verify [--model NAME|file.gguf] [--config loopd.toml --upstream host:port]
                              [--gateway gateway.toml [--gateway-only]]

With no config, the local llama-server of a model profile (conf/profiles/; `local`, SmolLM2, by
default; `qwen-coder`, the tool model); with one, the owner's server at `--upstream`, through an
inferproxy this starts. Either way with brokerd, in a temporary run folder under supervisord
(stack.py). One line per check, PASS, FAIL or SKIP (the rules are checks.py), then a summary;
exit 1 if a check failed, else 0. The run folder is kept when a check failed, so its logs can be
read. With --gateway, gatewayd's checks against the owner's Mattermost server come first
(gateway.py); --gateway-only runs those alone.

The tool checks run each in a fresh session (a prose answer earlier in the history changes what a
small model does next) on files planted in brokerd's workspace, and each reads what came back:
the call, its ToolResult's content and the answer. write_file's approval is given on owner.sock
by `bxctl chat --owner-socket`, as the owner would.
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import socket
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from boxmaker.loopd.config import ConfigError, load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.proto import ToolSchema
from boxmaker.proto.broker import BROKER_KINDS
from boxmaker.proto.errors import ProtocolError
from boxmaker.proto.frame import CLOSED, NEED_DATA, Frame, FrameDecoder, encode_frame
from boxmaker.proto.log import LogRecord
from boxmaker.session.baseline import Baseline, budget_text
from boxmaker.session.check import check_session
from boxmaker.verify import checks
from boxmaker.verify.checks import Check, Status
from boxmaker.verify.gateway import gateway_checks
from boxmaker.verify.profile import DEFAULT, ProfileError, load_profile
from boxmaker.verify.stack import Stack, StackError, wait_for

SESSION = "verify-device"
TURN_BOUND = 300.0  # seconds for one turn or completion on a loaded 2-core machine
THINKING_CAP = 16
CLOCK_SLACK_S = 2 * TURN_BOUND  # the clock's answer is read after the turn, within its bound
WRITTEN = "hello from verify-device"
PROMPTS = {
    "plain": "What is the capital of France?",
    "clock": "What time is it? Use the clock tool.",
    "read_file": "Read the file notes.txt and tell me the locker code written in it.",
    "list_dir": "List the files in the folder box.",
    "write_file": f'Write the text "{WRITTEN}" to the file greeting.txt.',
    "resume": "Thanks. Say goodbye.",
    "think": "Think step by step: what is 17 times 23?",
    "long": "Write a long story about a dragon who learns to bake bread.",
}


def json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


class Run:
    """The checks in order against one stack; each result printed as soon as it is known."""

    def __init__(self, stack: Stack, out: TextIO) -> None:
        self.stack, self.out = stack, out
        self.results: list[Check] = []
        self.sessions: list[str] = []  # every session a turn ran in, in order

    def add(self, check: Check) -> None:
        self.results.append(check)
        print(check.line(), file=self.out, flush=True)

    def guarded(self, name: str, expected: str, step: Callable[[], Check | None]) -> None:
        """Runs one check; anything it raises is that check's FAIL, in one line."""
        try:
            check = step()
        except (StackError, InferError, OSError, ValueError) as exc:
            check = Check(name, Status.FAIL, _describe(exc), expected)
        except Exception as exc:
            check = Check(name, Status.FAIL, f"{type(exc).__name__}: {exc}", expected)
        if check is not None:
            self.add(check)

    # --- the steps -------------------------------------------------------------------------------

    def start(self) -> None:
        self.stack.start()

    def wait_loopd(self) -> None:
        self.stack.wait_loopd()

    def selftest(self) -> Check:
        p = self.stack.loopd("selftest", "--config", str(self.stack.config_path))
        return checks.judge_selftest(p.returncode, p.stdout + p.stderr)

    def say(
        self, text: str, session: str = SESSION, approve: str = ""
    ) -> tuple[dict[str, Any] | None, str]:
        """One `bxctl chat --say --json` turn: turn_done's body, or None and what ended it.
        `approve`: the owner's answers to approvals, a line each (none: each is denied)."""
        if session not in self.sessions:
            self.sessions.append(session)
        p = self.stack.bxctl("--session", session, "--json", "--say", text, timeout=TURN_BOUND,
                             stdin=approve)  # fmt: skip
        lines = json_lines(p.stdout)
        final = lines[-1] if lines else {}
        if p.returncode == 0 and "usage" in final:
            return final, ""
        if "code" in final:
            return None, f"error {final['code']}: {final.get('message')}"
        return None, f"bxctl exited {p.returncode}: {p.stderr.strip()[-200:]}"

    def records(self, session: str = SESSION) -> list[LogRecord]:
        """The session's records, checked from disk without its lock (its worker holds it)."""
        folder = self.stack.home / "sessions" / session
        log, base = folder / "0.jsonl", folder / "0.baseline.json"
        found = check_session(session, str(log), log.read_bytes(), str(base), base.read_bytes())
        return list(found.records)

    def budget(self) -> Check:
        base = self.stack.home / "sessions" / SESSION / "0.baseline.json"
        baseline = Baseline.from_bytes(base.read_bytes(), str(base))
        client = Client(load_config(self.stack.config_path).inference)
        return checks.judge_budget(len(client.tokenize(budget_text(baseline))))

    def tool_turn(
        self, name: str, tool: str, rule: checks.Rule, expected: str, approve: str = ""
    ) -> Check:
        """PROMPTS[name] in a fresh session of its own; judged on its records and answer."""
        session = f"verify-{name.replace('_', '-')}"
        if session in self.sessions:  # a check run again (the tests) gets a fresh one too
            session += f"-{len(self.sessions)}"
        done, error = self.say(PROMPTS[name], session, approve)
        records = self.records(session)
        return checks.judge_tool_turn(name, records, done, error, tool, rule, expected)

    def brokerd(self) -> Check:
        """brokerd answers `list` on the stack's broker.sock, as loopd asks it each turn."""
        return checks.judge_brokerd(
            _list_tools(self.stack.broker_sock), str(self.stack.broker_sock)
        )

    def clock(self) -> Check:
        rule = checks.clock_rule(datetime.now(UTC), CLOCK_SLACK_S)
        return self.tool_turn("clock", "clock", rule, "a clock call, the time now, quoted")

    def read_file(self) -> Check:
        code = f"{secrets.randbelow(9000) + 1000}"
        text = f"The locker code is {code}.\n"
        (self.stack.workspace / "notes.txt").write_text(text)
        rule = checks.contains_rule([text.strip()], [code])
        return self.tool_turn("read_file", "read_file", rule, f"the file's text, the code {code}")

    def list_dir(self) -> Check:
        box = self.stack.workspace / "box"
        shutil.rmtree(box, ignore_errors=True)  # a check run again lists only its own files
        box.mkdir()
        names = [f"apple-{secrets.randbelow(900) + 100}.txt", "pear.txt"]
        for n in names:
            (box / n).write_text(n)
        rule = checks.contains_rule(names, names)
        return self.tool_turn("list_dir", "list_dir", rule, f"a listing of {', '.join(names)}")

    def write_file(self) -> Check:
        path = self.stack.workspace / "greeting.txt"
        path.unlink(missing_ok=True)
        rule = checks.written_rule(WRITTEN.encode(), lambda: _read(path))
        expected = "approved on owner.sock, 'wrote ...', the file holds the text"
        return self.tool_turn("write_file", "write_file", rule, expected, approve="yes\n")

    def log(self) -> Check:
        records = [r for s in self.sessions for r in self.records(s)]
        return checks.judge_log(records)

    def resume(self) -> Check:
        before = self.records()
        restart = self.stack.ctl("restart", "loopd")
        if restart.returncode != 0:
            raise StackError(f"supervisorctl restart loopd: {restart.stdout.strip()}")
        self.stack.wait_loopd()
        done, error = self.say(PROMPTS["resume"])
        return checks.judge_resume(before, self.records(), done, error)

    def thinking_cap(self) -> Check:
        config = self.stack.write_config("think.toml", thinking_cap=THINKING_CAP)
        p = self.stack.loopd("complete", "--config", str(config), "--say", PROMPTS["think"],
                             timeout=TURN_BOUND)  # fmt: skip
        return checks.judge_thinking_cap(p.returncode, json_lines(p.stdout), THINKING_CAP)

    def proxy_kill(self) -> Check:
        """A stream through inferproxy, which is killed (SIGKILL) once tokens flow; supervisord
        restarts it and loopd's retry carries the request through."""
        config = self.stack.write_config("long.toml", max_tokens=400)
        tee = self.stack.tee
        seen = len(tee.exchanges)
        argv = ["complete", "--config", str(config), "--say", PROMPTS["long"], "--no-thinking"]
        proc = self.stack.loopd_popen(*argv)

        def streaming() -> bool:
            new = [ex for ex in tee.exchanges[seen:] if ex.request.startswith(b"POST /v1/chat")]
            return proc.poll() is not None or any(ex.response.count(b"data: ") >= 3 for ex in new)

        wait_for(streaming, "streamed tokens", TURN_BOUND)
        killed = proc.poll() is None
        if killed:
            signal = self.stack.ctl("signal", "KILL", "inferproxy")
            killed = signal.returncode == 0
        out, _ = proc.communicate(timeout=TURN_BOUND)
        return checks.judge_survives_proxy_kill(proc.returncode, json_lines(out), killed)

    def requests(self) -> Check:
        bodies = []
        for ex in self.stack.tee.chat_exchanges():
            ex.wait_closed()
            _, _, body = bytes(ex.request).partition(b"\r\n\r\n")
            bodies.append(orjson.loads(body))
        return checks.judge_requests(bodies)

    # --- the order -------------------------------------------------------------------------------

    def after_loopd(self) -> list[tuple[str, str, Callable[[], Check | None]]]:
        """The checks that run once loopd listens, in order, each (name, expected, step): all()
        runs every one; the tests run on their own stack the ones a model changes."""
        return [
            ("plain", "an answer", lambda: checks.judge_plain_turn(
                "plain", *self.say(PROMPTS["plain"]))),
            ("baseline", "at most 3000 tokens", self.budget),
            ("brokerd", "brokerd lists its tools", self.brokerd),
            ("clock", "a clock call", self.clock),
            ("read_file", "a read_file call", self.read_file),
            ("list_dir", "a list_dir call", self.list_dir),
            ("write_file", "an approved write_file call", self.write_file),
            ("log", "a consistent log", self.log),
            ("resume", "a resumed turn that hits the cache", self.resume),
            ("thinking_cap", "a capped thinking block", self.thinking_cap),
            ("proxy_kill", "a stream that survives", self.proxy_kill),
            ("requests", "every request extends the one before", self.requests),
        ]  # fmt: skip

    def all(self) -> None:
        exp = "the stack starts"
        self.guarded("start", exp, self.start)
        if self.results:  # the stack did not start: nothing else can run
            return
        self.guarded("selftest", "exit 0", self.selftest)
        count = len(self.results)
        self.guarded("loopd", "loopd serve listening", self.wait_loopd)
        if len(self.results) > count:  # loopd did not start: no turn can run
            return
        for name, expected, step in self.after_loopd():
            self.guarded(name, expected, step)


def _list_tools(path: Path) -> list[ToolSchema] | None:
    """brokerd's `list` answer on broker.sock (the frames loopd's BrokerPort sends); None when
    nothing answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TURN_BOUND)
            sock.connect(str(path))
            sock.sendall(encode_frame("list", {}, True, BROKER_KINDS))
            decoder = FrameDecoder(BROKER_KINDS)
            while (got := decoder.next_frame()) is not CLOSED:
                if got is NEED_DATA:
                    decoder.receive_data(sock.recv(65536))
                elif isinstance(got, Frame) and got.kind == "tools":
                    return [ToolSchema.from_json(t) for t in got.body["tools"]]
    except (OSError, ProtocolError, KeyError, TypeError):
        return None
    return None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _describe(exc: BaseException) -> str:
    """One line (supervisorctl's answers span several)."""
    text = exc.describe() if isinstance(exc, InferError) else str(exc) or type(exc).__name__
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    global TURN_BOUND, CLOCK_SLACK_S  # --turn-bound: read by every check at its turn
    parser = argparse.ArgumentParser(prog="verify-device", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, help="loopd's config for the owner's server")
    parser.add_argument("--upstream", help="host:port of that llama-server (with --config)")
    parser.add_argument("--model", help=f"a model profile, conf/profiles/<name>.toml (default "
                        f"{DEFAULT}), or a .gguf for the local llama-server with {DEFAULT}'s "
                        "flags")  # fmt: skip
    parser.add_argument("--turn-bound", type=float, default=TURN_BOUND, metavar="SECONDS",
                        help=f"one turn's bound (default {TURN_BOUND:g}); a turn cut by it is a "
                        "FAIL, so raise it on a machine busier than 2 shared cores")  # fmt: skip
    parser.add_argument("--gateway", type=Path, metavar="GATEWAY_TOML",
                        help="also check gatewayd's Mattermost server, token and owner first "
                        "(gateway.py)")  # fmt: skip
    parser.add_argument("--gateway-only", action="store_true",
                        help="with --gateway: those checks alone, no stack")  # fmt: skip
    args = parser.parse_args(argv)
    if args.gateway_only and args.gateway is None:
        print("verify-device: GATEWAY_ONLY needs GATEWAY=<gateway.toml>", file=sys.stderr)
        return 2
    gateway: list[Check] = []
    if args.gateway is not None:
        print(f"verify-device: the gateway of {args.gateway}", file=out)
        gateway = gateway_checks(args.gateway)
        for check in gateway:
            print(check.line(), file=out, flush=True)
        if args.gateway_only:
            print(f"verify-device: {checks.summary(gateway)}", file=out)
            return checks.exit_status(gateway)
    TURN_BOUND, CLOCK_SLACK_S = args.turn_bound, 2 * args.turn_bound
    name, model = DEFAULT, None
    if args.model and ("/" in args.model or args.model.endswith(".gguf")):
        model = Path(args.model)
    elif args.model:
        name = args.model
    try:
        profile = load_profile(name)
    except ProfileError as err:
        print(f"verify-device: {err}", file=sys.stderr)
        return 2
    if bool(args.config) != bool(args.upstream):
        print("verify-device: CONFIG= and UPSTREAM= go together (the owner's loopd.toml and "
              "its llama-server's host:port); give both or neither", file=sys.stderr)  # fmt: skip
        return 2
    if args.config is not None:
        try:
            load_config(args.config)
        except ConfigError as err:
            print(f"verify-device: {err}", file=sys.stderr)
            return 2
    stack = Stack(args.config, args.upstream, model, profile)
    target = args.upstream or f"the local llama-server (make run's), profile {profile.name}"
    print(f"verify-device: {target}, config {stack.source}, run folder {stack.run}", file=out)
    started = time.monotonic()
    run = Run(stack, out)
    run.results += gateway
    try:
        run.all()
    finally:
        failed = checks.exit_status(run.results) != 0
        stack.stop(keep=failed)
    kept = f"; logs kept in {stack.run}" if failed else ""
    took = time.monotonic() - started
    print(f"verify-device: {checks.summary(run.results)} in {took:.0f} s{kept}", file=out)
    return checks.exit_status(run.results)
