"""`make status` (scripts/status.py) on a run folder whose supervisord is gone (after `make
stop`): one line saying so and what to run, no supervisorctl fault, and no tools read from the
brokerd.log a stopped brokerd left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_status_after_make_stop_says_nothing_runs(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that names no process now
    (tmp_path / "supervisord.pid").write_text(f"{gone.pid}\n")
    (tmp_path / "brokerd.log").write_text(
        "brokerd: listening on x.sock, workspace /w, shell: sandbox ready\n"
    )
    (tmp_path / "run.env").write_text(
        f"BOXMAKER_SOCKET={tmp_path / 'loop.sock'}\nBOXMAKER_UPSTREAM=127.0.0.1:9\n"
        f"BOXMAKER_LOOPD_CONFIG={tmp_path / 'loopd.toml'}\n"
    )
    p = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "status.py")],
        env={**os.environ, "BOXMAKER_RUN": str(tmp_path)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    shown = p.stdout + p.stderr
    assert p.returncode == 1, shown
    assert "  none: make run's supervisord is not running here; start it with make run" in shown
    assert "tools:    none: brokerd is not running" in p.stdout, shown
    assert "Fault" not in shown, shown
    assert "Traceback" not in shown, shown
    assert f"{tmp_path / 'loop.sock'} (missing)" in p.stdout, shown
