"""`bxctl verify-broker <log>`: checks brokerd's decision log's chain from disk (issue 22).

Read-only and lock-free, like `bxctl verify`: every line whole, in sequence, each linked to the
one before by its hash, across the files the log was rotated into (`<log>.1`, ... then `<log>`).
It does not replay the decisions (that needs brokerd's grants code:
`python -m boxmaker.brokerd verify --log <log>` does both).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from boxmaker._cli import Environment, ExitStatus
from boxmaker.session.chain import ChainError
from boxmaker.session.chain_files import verify_files

HELP = "check brokerd's decision log's hash chain from disk"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", type=Path, help="brokerd's [broker] log file")


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    try:
        _, records = verify_files(str(args.log))  # its rotated files, oldest first
    except OSError as exc:
        env.stderr.write(f"bxctl verify-broker: {args.log}: {exc.strerror or exc}\n")
        return ExitStatus.ERROR
    except ChainError as exc:
        env.stdout.write(f"{args.log}: REFUSED: {exc}\n")
        return ExitStatus.ERROR
    kinds = Counter(str(r.get("type")) for r in records)
    counted = ", ".join(f"{kinds[k]} {k}" for k in sorted(kinds)) or "empty"
    env.stdout.write(f"{args.log}: ok: {len(records)} lines chained ({counted})\n")
    return ExitStatus.OK
