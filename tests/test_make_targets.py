"""What some make targets do when they meet the ordinary cases (issue 39 item 7, issue 35 item 5):
`make stop` with nothing running is one line and exit 0 (supervisorctl's error and exit 2 before),
and `make test` lists its slowest 25 tests at the end."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_stop_with_nothing_running_says_so_and_succeeds(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "supervisord.pid").write_text(f"{gone.pid}\n")  # a stale one, as a crash leaves
    for folder in (tmp_path, tmp_path / "never-started"):
        p = subprocess.run(["make", "-s", "-C", str(ROOT), "stop", f"BOXMAKER_RUN={folder}"],
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stderr == ""
        assert p.stdout == (
            f"stop: nothing to stop (make run's supervisord is not running in {folder})\n"
        )


def test_make_test_prints_the_slowest_25() -> None:
    p = subprocess.run(["make", "-n", "-C", str(ROOT), "test", "PYTEST_ARGS=-k nothing"],
                       capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    [line] = [x for x in p.stdout.splitlines() if " -m pytest " in x]
    assert "--durations=25" in line, line
