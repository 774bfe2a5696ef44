"""The run folder's layout, held to conf/ (issue 18): every path conf/ names under $BOXMAKER_RUN
is either a file a program makes itself (a log, a socket, the pid file) or a folder that
verify-device (stack.RUN_FOLDERS) and `make run` (scripts/run.sh) both create before supervisord
starts. A new folder in conf/ without them fails here, before the slower whole-stack test
(test_device_real.py) shows the program going FATAL.
"""

from __future__ import annotations

import re
from pathlib import Path

from boxmaker.verify.stack import REPO, RUN_FOLDERS

CONF = REPO / "conf"
RUN_PATH = re.compile(r"%\(ENV_BOXMAKER_RUN\)s/([^\s;]+)")
# What a program creates by itself in the run folder: supervisord its logs, socket and pid file,
# inferproxy its socket.
MADE_BY_A_PROGRAM = re.compile(r"[\w.-]+\.(log|sock|pid)")


def conf_run_paths() -> set[str]:
    found: set[str] = set()
    for path in CONF.rglob("*.conf"):
        for line in path.read_text().splitlines():
            if not line.lstrip().startswith(";"):
                found |= set(RUN_PATH.findall(line))
    return found


def test_every_run_path_in_conf_is_made_by_a_program_or_by_the_starters() -> None:
    paths = conf_run_paths()
    assert {"slots", "supervisord.log"} <= paths, paths  # the scan sees conf/
    needed = set()
    for p in paths:
        if MADE_BY_A_PROGRAM.fullmatch(p):
            continue
        needed.add(Path(p).parts[0])  # supervisord.d/*.conf: its folder
    assert needed <= set(RUN_FOLDERS), f"conf/ names folders verify-device does not make: {needed}"


def test_run_sh_makes_the_same_folders() -> None:
    script = (REPO / "scripts" / "run.sh").read_text()
    made = next(line for line in script.splitlines() if line.startswith("mkdir -p "))
    for name in RUN_FOLDERS:
        assert f'"$BOXMAKER_RUN/{name}"' in made, (name, made)
