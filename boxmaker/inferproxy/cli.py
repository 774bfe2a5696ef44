"""`inferproxy --listen <socket path> --upstream <host:port>`. No config file (m2a spec, section 2).

The limit flags exist so tests and benchmarks can set them; their defaults are the brief's.
`main(argv, env)` takes its streams from an injected `Environment`, so tests call it in-process.
"""

import argparse
from typing import TYPE_CHECKING

from boxmaker._cli import Environment, ExitStatus, Parser, ParserExit
from boxmaker._daemon import SetupError
from boxmaker._daemon.log import DaemonLog

from .limits import DEFAULT_ACCEPT_BURST, DEFAULT_ACCEPT_RATE, DEFAULT_MAX_CONNECTIONS
from .proxy import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FIRST_BYTE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    Proxy,
    Settings,
)

if TYPE_CHECKING:
    pass


def parse_upstream(text: str) -> tuple[str, int]:
    """`host:port` or `[v6addr]:port` -> (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise SetupError(f"--upstream must be host:port, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise SetupError(
            f"--upstream: write an IPv6 address in brackets, as [::1]:8080; got {text!r}"
        )
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise SetupError(f"--upstream port must be a number from 1 to 65535, got {port_text!r}")
    return host, int(port_text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


# The longest timeout a flag takes: a week is past any wait that means something, and keeps every
# timeout inside what poll(2) and the socket calls can be given.
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600


def _seconds(text: str) -> float:
    value = _positive_float(text)
    if value > MAX_TIMEOUT_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_TIMEOUT_SECONDS} seconds (a week), got {text!r}"
        )
    return value


def build_parser(env: Environment | None = None) -> argparse.ArgumentParser:
    parser = Parser(
        env=env or Environment(),
        prog="inferproxy",
        description="Forward a Unix socket to one TCP upstream, bytes only.",
    )
    parser.add_argument("--listen", required=True, metavar="PATH", help="Unix socket to create")
    parser.add_argument("--upstream", required=True, metavar="HOST:PORT", help="TCP upstream")
    parser.add_argument(
        "--max-connections",
        type=_positive_int,
        default=DEFAULT_MAX_CONNECTIONS,
        help=f"connections open at once (default {DEFAULT_MAX_CONNECTIONS})",
    )
    parser.add_argument(
        "--accept-burst",
        type=_positive_int,
        default=DEFAULT_ACCEPT_BURST,
        help=f"token bucket size on accept (default {DEFAULT_ACCEPT_BURST})",
    )
    parser.add_argument(
        "--accept-rate",
        type=_positive_float,
        default=DEFAULT_ACCEPT_RATE,
        help=f"token bucket refill per second (default {DEFAULT_ACCEPT_RATE:g})",
    )
    parser.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=DEFAULT_CONNECT_TIMEOUT,
        help=f"seconds to reach the upstream (default {DEFAULT_CONNECT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--first-byte-timeout",
        type=_seconds,
        default=DEFAULT_FIRST_BYTE_TIMEOUT,
        help="seconds a new connection may wait for its first byte from the client "
        f"(default {DEFAULT_FIRST_BYTE_TIMEOUT:g})",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=DEFAULT_IDLE_TIMEOUT,
        help="seconds a connection may carry no byte either way; at least --first-byte-timeout, "
        "and longer than the client's longest wait for an answer "
        f"(default {DEFAULT_IDLE_TIMEOUT:g})",
    )
    return parser


def main(argv: list[str] | None = None, env: Environment | None = None) -> ExitStatus:
    """Runs the proxy until SIGTERM or SIGINT (OK), or says in one line why it cannot (USAGE).

    Args:
        argv: the arguments after the program name; sys.argv[1:] when None.
        env: the streams; the process's own when None.
    """
    env = env or Environment()
    try:
        args = build_parser(env).parse_args(argv)
    except ParserExit as exc:
        return ExitStatus(exc.status)
    try:
        host, port = parse_upstream(args.upstream)
        if args.idle_timeout < args.first_byte_timeout:
            raise SetupError(
                f"--idle-timeout ({args.idle_timeout:g} s) must be at least "
                f"--first-byte-timeout ({args.first_byte_timeout:g} s)"
            )
        settings = Settings(
            listen=args.listen,
            upstream_host=host,
            upstream_port=port,
            max_connections=args.max_connections,
            accept_burst=args.accept_burst,
            accept_rate=args.accept_rate,
            connect_timeout=args.connect_timeout,
            first_byte_timeout=args.first_byte_timeout,
            idle_timeout=args.idle_timeout,
        )
        Proxy(settings, DaemonLog("inferproxy", env.stdout, env.stderr)).serve()
    except SetupError as exc:
        env.stderr.write(f"inferproxy: {exc}\n")
        env.stderr.flush()
        return ExitStatus.USAGE  # nothing was started: the flags asked for what cannot be
    return ExitStatus.OK
