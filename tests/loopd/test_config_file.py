"""loopd's config file, read bounded: a regular file of at most 1 MiB, one line per failure.

A FIFO would hang loopd, /dev/zero would exhaust its memory, TOML nested 50,000 deep raised a
RecursionError with a 3,000-line traceback (issue 9, item 2). Each is now refused with one line
naming the file, checked through load_config (in a thread with a bound, so a hang fails rather
than hangs) and through loopd itself, which exits 1.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from boxmaker._cli import ExitStatus
from boxmaker.loopd.cli import main
from boxmaker.loopd.config import MAX_CONFIG_BYTES, ConfigError, load_config
from tests.support.cli import run_cli
from tests.support.loopd.config import error, set_key, text
from tests.support.procs import python_module, wait_for

DEEP = 50_000


# ---- the file ----------------------------------------------------------------------------------


def load_bounded(path: Path) -> ConfigError:
    """load_config(path) in a thread that must end within the bound; the error it raised."""
    caught: list[BaseException] = []

    def run() -> None:
        try:
            load_config(path, env={})
        except BaseException as exc:  # handed to the test thread
            caught.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: not thread.is_alive(), f"load_config({path}) to return")
    assert len(caught) == 1, "it loaded"
    assert isinstance(caught[0], ConfigError), repr(caught[0])
    assert "\n" not in str(caught[0])
    assert str(caught[0]).startswith(f"{path}: ")
    return caught[0]


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "loopd.toml"
    os.mkfifo(fifo)
    assert "cannot read it: a FIFO, not a regular file" in str(load_bounded(fifo))


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused_unread(device: str, tmp_path: Path) -> None:
    assert "a character device, not a regular file" in str(load_bounded(Path(device)))
    link = tmp_path / "loopd.toml"
    link.symlink_to(device)  # a link is followed, and what it points at is checked
    assert "a character device, not a regular file" in str(load_bounded(link))


def test_a_folder_is_refused(tmp_path: Path) -> None:
    assert "cannot read it: a folder, not a regular file" in str(load_bounded(tmp_path))


def padded(size: int) -> bytes:
    """A valid config of exactly `size` bytes: the required keys, then a comment."""
    head = text().encode() + b"#"
    return head + b"x" * (size - len(head) - 1) + b"\n"


def test_a_file_of_1_mib_loads_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loopd.toml"
    path.write_bytes(padded(MAX_CONFIG_BYTES))
    assert load_config(path, env={}).inference.model == "smol"
    path.write_bytes(padded(MAX_CONFIG_BYTES + 1))
    assert "larger than 1048576 bytes (1 MiB)" in str(load_bounded(path))


def test_toml_nested_50000_deep_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "loopd.toml"
    path.write_text(text() + "[loop]\nx = " + "[" * DEEP + "]" * DEEP + "\n")
    assert str(load_bounded(path)) == f"{path}: not valid TOML: nested too deeply to parse"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (text(inference='"bad\\nkey" = 1'), "unknown key inference.bad\\nkey"),
        (text(selftest='tool_choice = "a\\nb"'), 'got "a\\nb"'),
        (text() + '[inference."x\\ny"]\n', "unknown section [inference.x\\ny]"),
        (text(inference='"a\u2028b" = 1'), "unknown key inference.a\\u2028b"),
    ],
)
def test_a_message_stays_one_line_whatever_the_file_holds(content: str, says: str) -> None:
    message = str(error(content))
    assert "\n" not in message
    assert "\u2028" not in message
    assert says in message


def test_a_str_with_a_lone_surrogate_is_refused() -> None:
    assert "not UTF-8 text" in str(error(text(inference='model = "\ud800"')))


# ---- the command line ---------------------------------------------------------------------------


def write_case(case: str, folder: Path) -> Path:
    path = folder / "loopd.toml"
    if case == "fifo":
        os.mkfifo(path)
    elif case == "too_large":
        path.write_bytes(padded(MAX_CONFIG_BYTES + 1))
    elif case == "deep":
        path.write_text("x = " + "[" * DEEP + "]" * DEEP + "\n")
    elif case == "not_toml":
        path.write_text("[inference\n")
    elif case == "overflow":
        path.write_text(set_key("inference.liveness_ms", "10000000000000"))
    return path


CASES = ["fifo", "too_large", "deep", "not_toml", "overflow"]


@pytest.mark.parametrize("case", CASES)
def test_loopd_says_one_line_naming_the_file_and_exits_1(case: str, tmp_path: Path) -> None:
    path = write_case(case, tmp_path)
    done: list[Any] = []
    thread = threading.Thread(
        target=lambda: done.append(run_cli(main, ["selftest", "--config", path])), daemon=True
    )
    thread.start()
    wait_for(lambda: not thread.is_alive(), f"loopd selftest on the {case} config to end")
    [result] = done
    assert result.status == ExitStatus.ERROR
    assert result.stdout == ""
    [line] = result.stderr_lines
    assert line.startswith(f"loopd selftest: {path}: ")


def test_a_real_loopd_on_toml_50000_deep_prints_one_line(tmp_path: Path) -> None:
    # In a fresh process, as the owner meets it: no 3,000-line traceback.
    path = write_case("deep", tmp_path)
    argv = python_module("boxmaker.loopd", "selftest", "--config", str(path))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr == f"loopd selftest: {path}: not valid TOML: nested too deeply to parse\n"
