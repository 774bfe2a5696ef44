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
    halves = [x for x in p.stdout.splitlines() if " -m pytest " in x]
    assert len(halves) == 2, halves
    assert all("--durations=25" in line for line in halves), halves
    assert '-m "not model" -n 2 ' in halves[0], halves[0]


HALVES = """import pytest


def test_fails_in_the_first_half():
    assert False


@pytest.mark.model
def test_runs_in_the_second_half():
    pass
"""


def test_make_test_runs_the_model_half_after_a_failed_first_half_and_fails(
    tmp_path: Path,
) -> None:
    """The two halves of make test (tests/support/model_group.py): a failure in the first does not
    skip the second, and either failing fails make test. The set-up targets are taken as done."""
    (tmp_path / "test_halves.py").write_text(HALVES)
    args = f"-p no:cacheprovider -W ignore::pytest.PytestUnknownMarkWarning {tmp_path}"
    p = subprocess.run(
        ["make", "-C", str(ROOT), "-o", "install", "-o", "llama-server", "-o", "tool-model",
         "test", f"PYTEST_ARGS={args}"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert p.returncode != 0, p.stdout
    first, second = p.stdout.find("\n1 failed"), p.stdout.find("\n1 passed, 1 deselected")
    assert 0 < first < second, p.stdout
