"""`main(argv, env)` in-process: what the CLI refuses before it serves, with no daemon started.

Each case returns a named ExitStatus and says why in one line on the injected stderr; none of them
leaves a socket file behind.
"""

import os

import pytest

from boxmaker._cli import ExitStatus
from tests.support.inferproxy.proxy import run_main as run


@pytest.mark.parametrize(
    ("upstream_arg", "message"),
    [
        ("no-port-here", "inferproxy: --upstream must be host:port, got 'no-port-here'\n"),
        ("127.0.0.1:0", "inferproxy: --upstream port must be a number from 1 to 65535, got '0'\n"),
        (
            "::1:8080",
            "inferproxy: --upstream: write an IPv6 address in brackets, as [::1]:8080; "
            "got '::1:8080'\n",
        ),
    ],
)
def test_bad_upstream_is_usage_with_one_line(
    short_dir: str, upstream_arg: str, message: str
) -> None:
    path = os.path.join(short_dir, "never.sock")
    assert run("--listen", path, "--upstream", upstream_arg) == (ExitStatus.USAGE, "", message)
    assert not os.path.exists(path)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-connections", "0", "expected at least 1, got 0"),
        ("--accept-burst", "many", "expected a whole number, got 'many'"),
        ("--accept-rate", "nan", "expected a positive number, got 'nan'"),
        ("--connect-timeout", "-1", "expected a positive number, got '-1'"),
        ("--first-byte-timeout", "0", "expected a positive number, got '0'"),
        ("--idle-timeout", "inf", "expected a positive number, got 'inf'"),
        ("--idle-timeout", "1e300", "expected at most 604800 seconds (a week), got '1e300'"),
    ],
)
def test_bad_flag_value_is_usage_naming_the_flag(
    short_dir: str, flag: str, value: str, message: str
) -> None:
    path = os.path.join(short_dir, "never.sock")
    status, out, err = run("--listen", path, "--upstream", "127.0.0.1:9", flag, value)
    assert (status, out) == (ExitStatus.USAGE, "")
    assert err.startswith("usage: inferproxy ")
    assert err.endswith(f"inferproxy: error: argument {flag}: {message}\n")
    assert not os.path.exists(path)


def test_missing_flag_is_usage() -> None:
    status, out, err = run("--listen", "/nonexistent/x.sock")
    assert (status, out) == (ExitStatus.USAGE, "")
    assert err.endswith("inferproxy: error: the following arguments are required: --upstream\n")


def test_help_goes_to_stdout_and_is_ok() -> None:
    status, out, err = run("--help")
    assert (status, err) == (ExitStatus.OK, "")
    assert out.startswith("usage: inferproxy ")
    assert "--max-connections" in out


def test_path_too_long_is_usage(short_dir: str) -> None:
    path = os.path.join(short_dir, "s" * 120)
    status, out, err = run("--listen", path, "--upstream", "127.0.0.1:9")
    assert (status, out) == (ExitStatus.USAGE, "")
    assert err == (
        f"inferproxy: --listen path is {len(path)} bytes; a Unix socket path may have at "
        f"most 107: {path}\n"
    )


def test_path_that_is_a_file_is_usage_and_the_file_is_kept(short_dir: str) -> None:
    path = os.path.join(short_dir, "infer.sock")
    with open(path, "w") as f:
        f.write("precious\n")
    status, out, err = run("--listen", path, "--upstream", "127.0.0.1:9")
    assert (status, out) == (ExitStatus.USAGE, "")
    assert "exists and is a regular file, not a socket; refusing to remove it" in err
    with open(path) as f:
        assert f.read() == "precious\n"


def test_idle_timeout_shorter_than_the_first_byte_timeout_is_usage(short_dir: str) -> None:
    path = os.path.join(short_dir, "never.sock")
    argv = ["--listen", path, "--upstream", "127.0.0.1:9"]
    status, out, err = run(*argv, "--first-byte-timeout", "10", "--idle-timeout", "2")
    assert (status, out) == (ExitStatus.USAGE, "")
    assert err == "inferproxy: --idle-timeout (2 s) must be at least --first-byte-timeout (10 s)\n"
    assert not os.path.exists(path)
