"""`make verify-device`: the briefs' on-device checks against the upstream of a config.

    python -m boxmaker.verify [--config loopd.toml --upstream host:port] [--model file.gguf]

With no config, the local llama-server `make run` uses (the SmolLM2 model, conf/loopd.local.toml);
with one, the owner's server at `--upstream`, through an inferproxy this starts. Either way in a
temporary run folder under supervisord (stack.py). One line per check, PASS, FAIL or SKIP (the
rules are checks.py), then a summary; exit 1 if a check failed, else 0. The run folder is kept
when a check failed, so its logs can be read.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson

from boxmaker.loopd.config import ConfigError, load_config
from boxmaker.loopd.llama.client import Client
from boxmaker.loopd.llama.errors import InferError
from boxmaker.proto import User
from boxmaker.proto.log import LogRecord
from boxmaker.session.baseline import Baseline, budget_text
from boxmaker.session.check import check_session
from boxmaker.verify import checks
from boxmaker.verify.checks import Check, Status
from boxmaker.verify.stack import Stack, StackError, wait_for

SESSION = "verify-device"
TURN_BOUND = 300.0  # seconds for one turn or completion on a loaded 2-core machine
THINKING_CAP = 16
PROMPTS = {
    "plain": "What is the capital of France?",
    "clock": "What time is it? Use the clock tool.",
    "echo": "Use find_tool to find the echo tool, then use call_tool to run echo with the text "
    '"hello".',
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

    def say(self, text: str) -> tuple[dict[str, Any] | None, str]:
        """One `bxctl chat --say --json` turn: turn_done's body, or None and what ended it."""
        p = self.stack.bxctl("--session", SESSION, "--json", "--say", text, timeout=TURN_BOUND)
        lines = json_lines(p.stdout)
        final = lines[-1] if lines else {}
        if p.returncode == 0 and "usage" in final:
            return final, ""
        if "code" in final:
            return None, f"error {final['code']}: {final.get('message')}"
        return None, f"bxctl exited {p.returncode}: {p.stderr.strip()[-200:]}"

    def records(self) -> list[LogRecord]:
        """The session's records, checked from disk without its lock (its worker holds it)."""
        folder = self.stack.home / "sessions" / SESSION
        log, base = folder / "0.jsonl", folder / "0.baseline.json"
        found = check_session(SESSION, str(log), log.read_bytes(), str(base), base.read_bytes())
        return list(found.records)

    def budget(self) -> Check:
        base = self.stack.home / "sessions" / SESSION / "0.baseline.json"
        baseline = Baseline.from_bytes(base.read_bytes(), str(base))
        client = Client(load_config(self.stack.config_path).inference)
        return checks.judge_budget(len(client.tokenize(budget_text(baseline))))

    def tool_turn(self, name: str, prompt: str, wanted: Sequence[str]) -> Check:
        done, error = self.say(prompt)
        records = self.records()
        turn = sum(isinstance(r, User) for r in records) - 1  # this turn is the last one
        return checks.judge_tool_turn(name, checks.turn_records(records, turn), done, error, wanted)

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
        self.guarded("plain", "an answer", lambda: checks.judge_plain_turn(
            "plain", *self.say(PROMPTS["plain"])))  # fmt: skip
        self.guarded("baseline", "at most 3000 tokens", self.budget)
        self.guarded("clock", "a clock call", lambda: self.tool_turn(
            "clock", PROMPTS["clock"], ["clock"]))  # fmt: skip
        self.guarded("echo", "find_tool then call_tool(echo)", lambda: self.tool_turn(
            "echo", PROMPTS["echo"], ["find_tool", "call_tool(echo)"]))  # fmt: skip
        self.guarded("log", "a consistent log", lambda: checks.judge_log(self.records()))
        self.guarded("resume", "a resumed turn that hits the cache", self.resume)
        self.guarded("thinking_cap", "a capped thinking block", self.thinking_cap)
        self.guarded("proxy_kill", "a stream that survives", self.proxy_kill)
        self.guarded("requests", "every request extends the one before", self.requests)


def _describe(exc: BaseException) -> str:
    """One line (supervisorctl's answers span several)."""
    text = exc.describe() if isinstance(exc, InferError) else str(exc) or type(exc).__name__
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="verify-device", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, help="loopd's config for the owner's server")
    parser.add_argument("--upstream", help="host:port of that llama-server (with --config)")
    parser.add_argument("--model", type=Path, help="another .gguf for the local llama-server")
    args = parser.parse_args(argv)
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
    stack = Stack(args.config, args.upstream, args.model)
    target = args.upstream or "the local llama-server (make run's)"
    print(f"verify-device: {target}, config {stack.source}, run folder {stack.run}", file=out)
    started = time.monotonic()
    run = Run(stack, out)
    try:
        run.all()
    finally:
        failed = checks.exit_status(run.results) != 0
        stack.stop(keep=failed)
    kept = f"; logs kept in {stack.run}" if failed else ""
    took = time.monotonic() - started
    print(f"verify-device: {checks.summary(run.results)} in {took:.0f} s{kept}", file=out)
    return checks.exit_status(run.results)
