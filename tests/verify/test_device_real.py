"""`make verify-device`'s own path, for real: `python -m boxmaker.verify` against the local
llama-server (the build script's cached one), in its own temporary run folder under the
repository's supervisord config, conf/programs/llama-server.conf and brokerd.conf. Every check it
runs, each line's status, its summary line and its exit status. A change to conf/ (a flag, a
folder the programs need) or to the stack that breaks `make verify-device` fails here (issue 18),
and so does a stack without brokerd: the `brokerd` check FAILs. The same checks on the tool
profile (qwen-coder, issue 28), where every tool check must PASS, run by verify-device's `Run` on
tests/e2e's one tool-model stack (tests/e2e/test_tool_model_checks.py): one start of the 1.1 GB
model for them and the e2e tool turns (issue 35 item 5).

And its fail-fast: a llama-server that cannot start (a model file that is not a model) ends the
run within seconds with one line naming the program and its log's last lines, not at the 180 s
bound.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from boxmaker.verify.checks import NO_CALL
from tests.support.llama import ensure_built

# The checks device.Run.all() runs, in order.
CHECKS = (
    "selftest", "plain", "baseline", "brokerd", "clock", "read_file", "list_dir", "write_file",
    "log", "resume", "thinking_cap", "proxy_kill", "requests",
)  # fmt: skip
TOOL_CHECKS = ("clock", "read_file", "list_dir", "write_file")
NO_REASONING = "the model did not reason at all"
# What the small local model cannot show, each with the only reason that makes its SKIP honest.
MAY_SKIP = {**dict.fromkeys(TOOL_CHECKS, NO_CALL), "thinking_cap": NO_REASONING}
BOUND = 1800.0  # seconds for a whole run on a loaded 2-core machine (30 s alone)
LINE = re.compile(r"(PASS|FAIL|SKIP) ([a-z_]+): (.*)")
SUMMARY = re.compile(r"verify-device: (\d+) PASS, (\d+) FAIL, (\d+) SKIP in \d+ s(.*)")


def verify(*args: str, timeout: float = BOUND) -> subprocess.CompletedProcess[str]:
    ensure_built()
    return subprocess.run(
        [sys.executable, "-m", "boxmaker.verify", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def test_verify_device_passes_every_check_against_the_local_server() -> None:
    passes_every_check(verify(), "local", MAY_SKIP)


def passes_every_check(p: subprocess.CompletedProcess[str], profile: str,
                       may_skip: dict[str, str]) -> None:  # fmt: skip
    lines = p.stdout.splitlines()
    shown = p.stdout + p.stderr
    assert lines, shown
    assert lines[0].startswith(f"verify-device: the local llama-server (make run's), profile "
                               f"{profile},"), shown  # fmt: skip
    run = Path(lines[0].rsplit("run folder ", 1)[1])
    found = [m.groups() for line in lines[1:-1] if (m := LINE.fullmatch(line))]
    assert len(found) == len(lines) - 2, f"a line that is not a check:\n{shown}"
    assert [name for _, name, _ in found] == list(CHECKS), shown
    for status, name, text in found:
        if status == "SKIP" and name in may_skip:
            assert text.startswith(may_skip[name]), shown
        else:
            assert status == "PASS", shown
    summary = SUMMARY.fullmatch(lines[-1])
    assert summary is not None, shown
    passes = sum(s == "PASS" for s, _, _ in found)
    skips = sum(s == "SKIP" for s, _, _ in found)
    assert summary.groups() == (str(passes), "0", str(skips), ""), shown
    assert p.returncode == 0, shown
    assert not run.exists(), "the run folder of a passing run is removed"


def test_a_program_that_cannot_start_ends_the_run_at_once(tmp_path: Path) -> None:
    model = tmp_path / "not-a-model.gguf"
    model.write_bytes(b"this is not a GGUF file\n")
    started = time.monotonic()
    p = verify("--model", str(model), timeout=120)
    took = time.monotonic() - started
    lines = p.stdout.splitlines()
    shown = p.stdout + p.stderr
    assert p.returncode == 1, shown
    fail = [line for line in lines if line.startswith("FAIL start: ")]
    assert len(fail) == 1, shown
    # One line: the program, the state supervisord gave up in, its log and the log's last words.
    assert re.match(r"FAIL start: llama-server FATAL \(.*\); last lines of \S+llama-server\.log: ",
                    fail[0]), shown  # fmt: skip
    assert "failed to load model" in fail[0] or "gguf" in fail[0].lower(), shown
    assert SUMMARY.fullmatch(lines[-1]) is not None, shown
    assert "0 PASS, 1 FAIL, 0 SKIP" in lines[-1], shown
    # supervisord gives up after startretries (3) quick exits: seconds, far from the 180 s bound.
    assert took < 60, f"took {took:.0f} s\n{shown}"
    kept = Path(lines[-1].rsplit("logs kept in ", 1)[1])
    assert (kept / "llama-server.log").is_file(), shown
    subprocess.run(["rm", "-rf", str(kept)], check=True)
