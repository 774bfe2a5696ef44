"""`loopd selftest` and `loopd complete`: exit codes, stdout's lines (one result or one JSON
object each) and stderr's messages; no traceback may show.

Against the real llama-server through the real inferproxy (tests/support/stack.py), each command
runs as a real subprocess (`python -m boxmaker.loopd`), as supervisord and the owner run it. What
needs no server (usage errors, a bad config or --messages file, a socket nobody listens on) calls
`main` in-process through tests/support/cli.py; two subprocess tests keep the entry point honest
(the status reaches the shell, Ctrl-C is 130).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boxmaker._cli import ExitStatus
from boxmaker._toml import toml_dumps
from boxmaker.loopd.cli import main
from tests.support.cli import Result, run_cli
from tests.support.procs import python_module, short_tmpdir
from tests.support.stack import Stack, local_profile

RUN_BOUND = 120.0  # seconds for one command; each takes a few when healthy
EVENT_TYPES = {
    "queued",
    "waiting",
    "progress",
    "reasoning",
    "content",
    "tool_call_delta",
    "thinking_capped",
    "retrying",
}


def loopd(*args: str | Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        python_module("boxmaker.loopd", *map(str, args)),
        capture_output=True,
        text=True,
        timeout=RUN_BOUND,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def loopd_in_process(*args: str | Path) -> Result:
    return run_cli(main, args)


def json_lines(stdout: str) -> list[dict[str, Any]]:
    lines = stdout.splitlines()
    assert lines, "no output"
    return [json.loads(line) for line in lines]


@pytest.fixture
def offline_dir() -> Iterator[Path]:
    """A short folder whose infer.sock nobody listens on."""
    path = short_tmpdir("loopd-cli-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def offline_config(folder: Path, **inference: Any) -> Path:
    table = local_profile()
    table.pop("channel")
    table.pop("paths")
    table.pop("cache", None)  # its slot_save line is tested in tests/loopd/cache
    table["inference"] |= {"socket": str(folder / "infer.sock")} | inference
    path = folder / "loopd.toml"
    path.write_text(toml_dumps(table))
    return path


# ---- loopd selftest ----------------------------------------------------------------------------


def test_selftest_passes_and_prints_one_line_per_check(stack: Stack) -> None:
    done = loopd("selftest", "--config", stack.write_config())
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "ok      props",
        "ok      tool_call",
        "ok      cache",
    ]
    assert "n_ctx 2048, total_slots 2" in lines[0]
    assert "get_time(" in lines[1]
    assert done.stderr == ""


def test_selftest_fails_naming_the_mismatch(single_stack: Stack) -> None:
    done = loopd("selftest", "--config", single_stack.write_config(expect={"total_slots": 3}))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        "FAILED  props: /props differs from [expect]: total_slots is 2, expected 3 ("
    )
    assert lines[1].startswith("ok      tool_call: ")
    assert lines[2].startswith("ok      cache: ")
    assert "loopd selftest: FAILED (props)" in done.stderr


def test_selftest_without_an_inferproxy_exits_1_with_what_it_could_not_reach(
    offline_dir: Path,
) -> None:
    done = loopd_in_process("selftest", "--config", offline_config(offline_dir))
    assert done.status == ExitStatus.ERROR
    props, tool_call, cache = done.stdout.splitlines()
    assert props.startswith("FAILED  props: no answer: connect: ")
    assert str(offline_dir / "infer.sock") in props
    assert "not run: the server could not be reached" in tool_call
    assert "not run: the server could not be reached" in cache
    assert done.stderr_lines == [
        "loopd selftest: FAILED (props, tool_call, cache); loopd will not start against this server"
    ]


def test_a_missing_config_exits_1_naming_the_file(offline_dir: Path) -> None:
    missing = offline_dir / "absent.toml"
    for command in (["selftest"], ["complete", "--say", "hi"]):
        done = loopd_in_process(*command, "--config", missing)
        assert done.status == ExitStatus.ERROR
        assert done.stdout == ""
        assert done.stderr_lines == [
            f"loopd {command[0]}: {missing}: no such file (conf/loopd.toml.example shows every key)"
        ]


def test_a_wrong_key_exits_1_naming_the_key(offline_dir: Path) -> None:
    path = offline_config(offline_dir)
    path.write_text(path.read_text().replace("max_tokens", "max_tokenz"))
    done = loopd_in_process("selftest", "--config", path)
    assert done.status == ExitStatus.ERROR
    [line] = done.stderr_lines
    assert line.startswith(f"loopd selftest: {path}: unknown key inference.max_tokenz")
    assert "did you mean" in line


def test_the_entry_point_exits_with_mains_status(offline_dir: Path) -> None:
    # The one subprocess among the offline tests: the status must reach the shell.
    missing = offline_dir / "absent.toml"
    done = loopd("selftest", "--config", missing)
    assert (done.returncode, done.stdout) == (1, "")
    assert (
        done.stderr
        == f"loopd selftest: {missing}: no such file (conf/loopd.toml.example shows every key)\n"
    )
    assert loopd().returncode == 2


# ---- loopd complete ----------------------------------------------------------------------------


def test_complete_prints_each_event_then_the_completion(stack: Stack) -> None:
    done = loopd(
        "complete", "--config", stack.write_config(), "--say", "Say hello.", "--no-thinking"
    )
    assert done.returncode == 0, done.stderr
    *events, last = json_lines(done.stdout)
    assert last["type"] == "completion"
    assert {e["type"] for e in events} <= EVENT_TYPES
    text = "".join(e["text"] for e in events if e["type"] == "content")
    assert text
    assert last["content"] == text
    assert last["finish_reason"] in ("stop", "length")
    assert last["reasoning_content"] is None
    assert last["tool_calls"] == []
    assert set(last["timings"]) == {"cache_n", "prompt_n", "predicted_n"}
    assert done.stderr == ""


def test_thinking_is_on_unless_no_thinking_is_given(single_stack: Stack) -> None:
    config = single_stack.write_config(inference={"max_tokens": 12})
    ask = "Write a very long essay about the history of Rome."
    thinking = json_lines(loopd("complete", "--config", config, "--say", ask).stdout)
    plain = json_lines(loopd("complete", "--config", config, "--say", ask, "--no-thinking").stdout)
    # With thinking on, the template opens <think> and this model does not close it in 12 tokens.
    assert {e["type"] for e in thinking} >= {"reasoning", "completion"}
    assert "content" not in {e["type"] for e in thinking}
    assert thinking[-1]["reasoning_content"]
    assert {e["type"] for e in plain} >= {"content", "completion"}
    assert "reasoning" not in {e["type"] for e in plain}
    assert plain[-1]["reasoning_content"] is None


def test_complete_reads_openai_messages_from_a_file(single_stack: Stack) -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What time is it in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"timezone": "Europe/Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
        {"role": "user", "content": "Say the time in one sentence."},
    ]
    path = single_stack.dir / "messages.json"
    path.write_text(json.dumps(messages))
    done = loopd(
        "complete", "--config", single_stack.write_config(), "--messages", path, "--no-thinking"
    )
    assert done.returncode == 0, done.stderr
    last = json_lines(done.stdout)[-1]
    assert last["type"] == "completion"
    assert last["content"]
    # The whole conversation was sent: far more prompt than the last message alone.
    assert last["timings"]["cache_n"] + last["timings"]["prompt_n"] > 60


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "cannot read it: No such file or directory"),
        ("[{", "the file is not JSON ("),
        (
            '{"role": "user", "content": "hi"}',
            "expected a non-empty JSON array of messages, got an object",
        ),
        ("[]", "expected a non-empty JSON array of messages, got an empty array"),
        ('[{"role": "robot", "content": "hi"}]', "messages[0].role: expected one of "),
        ('[{"role": "user"}]', "messages[0]"),
    ],
    ids=["missing", "not_json", "not_an_array", "empty", "bad_role", "no_content"],
)
def test_a_bad_messages_file_is_a_usage_error_naming_the_file(
    offline_dir: Path, content: str | None, said: str
) -> None:
    path = offline_dir / "messages.json"
    if content is not None:
        path.write_text(content)
    done = loopd_in_process("complete", "--config", offline_config(offline_dir), "--messages", path)
    assert done.status == ExitStatus.USAGE
    assert done.stdout == ""
    [line] = done.stderr_lines
    assert line.startswith(f"loopd complete: --messages {path}: ")
    assert said in line


def test_complete_prints_the_error_and_exits_1_on_http_400(single_stack: Stack) -> None:
    too_long = "The quick brown fox jumps over the lazy dog. " * 250
    done = loopd("complete", "--config", single_stack.write_config(), "--say", too_long)
    assert done.returncode == 1
    last = json_lines(done.stdout)[-1]
    assert last["type"] == "error"
    assert last["error"] == "http"
    assert last["status"] == 400
    assert "exceed_context_size_error" in last["body"]
    assert done.stderr.startswith("loopd complete: http: HTTP 400")


def test_complete_without_an_inferproxy_retries_then_exits_1(offline_dir: Path) -> None:
    config = offline_config(offline_dir, retry_delays_ms=[20, 20, 20])
    done = loopd_in_process("complete", "--config", config, "--say", "hi")
    assert done.status == ExitStatus.ERROR
    *events, last = json_lines(done.stdout)
    assert [e["type"] for e in events] == ["retrying"] * 3
    assert [e["attempt"] for e in events] == [2, 3, 4]
    assert last["type"] == "error"
    assert last["error"] == "connect"
    assert str(offline_dir / "infer.sock") in last["message"]
    [line] = done.stderr_lines
    assert line.startswith("loopd complete: connect: cannot connect to ")


# SIGINT ignored, then the program: what a shell without job control gives `cmd &` (issue 38.6:
# a make test run from such a job lost this SIGINT, and loopd complete waited on to its retry).
SIGINT_IGNORED = ("sh", "-c", 'trap "" INT; exec "$@"', "sh")


@pytest.mark.parametrize(
    "launcher", [(), SIGINT_IGNORED], ids=["sigint default", "sigint ignored by the parent"]
)
def test_ctrl_c_exits_130_saying_interrupted(offline_dir: Path, launcher: tuple[str, ...]) -> None:
    # A real process and a real SIGINT, sent while the client waits a minute before its retry.
    config = offline_config(offline_dir, retry_delays_ms=[60_000, 60_000, 60_000])
    argv = python_module("boxmaker.loopd", "complete", "--config", str(config), "--say", "hi")
    proc = subprocess.Popen(
        [*launcher, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], RUN_BOUND)
        assert ready, f"no retrying line within {RUN_BOUND} s"
        first = json.loads(proc.stdout.readline())  # the wait before retry 2 has begun
        assert first["type"] == "retrying"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=RUN_BOUND)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == ExitStatus.INTERRUPTED
    assert ExitStatus.INTERRUPTED.value == 130  # the shell's code for SIGINT
    assert stdout == ""
    assert stderr == "loopd complete: interrupted\n"


def test_a_reader_that_goes_away_ends_complete_quietly(single_stack: Stack) -> None:
    # `loopd complete ... | head -1`: a pipe of one page, closed after the first line, so the
    # writer meets the closed pipe long before the answer is over.
    config = single_stack.write_config(inference={"max_tokens": 200})
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    argv = python_module(
        "boxmaker.loopd",
        "complete",
        "--config",
        str(config),
        "--no-thinking",
        "--say",
        "Write a long essay about the history of Rome.",
    )
    proc = subprocess.Popen(argv, stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        first = json.loads(reader.readline())
    _, stderr = proc.communicate(timeout=RUN_BOUND)
    assert first["type"] in EVENT_TYPES
    assert proc.returncode == 1
    assert stderr == ""


# ---- usage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("complete", "--config", "x.toml"), "one of the arguments --say --messages is required"),
        (
            ("complete", "--config", "x.toml", "--say", "a", "--messages", "m.json"),
            "not allowed with argument",
        ),
        (("selftest",), "the following arguments are required: --config"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...], said: str) -> None:
    done = loopd_in_process(*args)
    assert done.status == ExitStatus.USAGE
    assert done.stdout == ""
    assert done.stderr.startswith("usage: loopd")
    assert said in done.stderr_lines[-1]


def test_help_goes_to_stdout_and_exits_0() -> None:
    done = loopd_in_process("complete", "--help")
    assert done.status == ExitStatus.OK
    assert done.stdout.startswith("usage: loopd complete ")
    assert "--no-thinking" in done.stdout
    assert done.stderr == ""
