"""Issue 37's security tests under the one-user and two-user deployments of docs/operations.md,
not only as root (where CI runs them, and where the sandbox runs as nobody and brokerd reads
every file whatever its mode).

Each deployment is a child pytest run as a second uid, started with setpriv as the docs start
brokerd: one user, a plain uid with no capability (brokerd, the sandbox and the test's loopd
all that uid); two users, the owner's uid with CAP_CHOWN ambient, the documented start line (it
must reach no sandbox: bwrap refuses to run with a capability). What the deployment changes is
what these tests try: the file modes brokerd meets (a folder it cannot open, a grants file
mid-edit, a file it may not say exists), the sandbox's uid (brokerd's own here, so a server
reads and writes as brokerd's uid: the mounts alone keep brokerd's files out, and its planted
set-id files are brokerd's), reading /proc for a server's memory, killing what a server
started. The peers of the two sockets with really different uids are
tests/brokerd/sandbox/test_uids.py and tests/brokerd/test_documented_start.py (root makes the
second uid there).

The child runs on the system's python3 with this checkout and the venv's packages on its path:
the venv's interpreter may sit under a folder only root can enter (/root/.pyenv here), and
brokerd's tests start `sys.executable` again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"


def _same_python() -> bool:
    if not os.path.exists(SYSTEM_PYTHON):
        return False
    got = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    return got.stdout.strip() == str(sys.version_info[:2])  # the venv's compiled modules load


NEEDS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("bwrap"),
    reason="running brokerd's tests as a second uid needs root, setpriv and bwrap",
)

# The tests whose outcome the deployment can change, by issue 37 item; a few variants of each
# (all of them run as root), so that both deployments add about 40 s to the suite.
MEMORY = "tests/brokerd/mcp/test_memory_whole.py::"
STOPPED = "test_processes_that_pass_memory_bytes_together_stop_the_server"
HOSTILE = "tests/brokerd/mcp/test_hostile.py::"
EDIT = (
    "tests/brokerd/approvals/test_always_edit.py::"
    "test_always_never_merges_into_a_file_caught_mid_edit"
)
QUOTA = "tests/brokerd/mcp/test_rw_quota.py::test_an_rw_server_writing_past_the_quota_is_stopped"
REFUSAL = (
    "tests/brokerd/security/test_attack_live.py::"
    "test_a_refusal_is_the_same_whether_or_not_the_file_is_there"
)
FETCH = (
    "tests/brokerd/tools/test_fetch_ports.py::test_always_on_a_loopback_url_grants_that_port_only"
)
# What a plain uid meets and root never does, and what the sandbox does as brokerd's own uid.
ONE_USER = [
    # item 7: a folder brokerd cannot open, set-id files, the write quota, as the files' owner
    "tests/brokerd/sandbox/test_tree_walk.py",
    "tests/brokerd/sandbox/test_setid.py::test_no_set_id_bit_survives_a_call",
    f"{QUOTA}[/workspace/h/big:64:0300]",
    f"{QUOTA}[/workspace/h/big:64:0000]",
    # the sandbox as brokerd's uid: the mounts alone keep brokerd's files out
    f"{HOSTILE}test_it_reads_no_host_file_it_was_not_given",
    f"{HOSTILE}test_it_cannot_plant_a_setuid_file",
    f"{HOSTILE}test_a_setuid_file_planted_in_an_rw_workspace_keeps_no_setuid_bit",
    f"{HOSTILE}test_it_is_killed_with_everything_it_started",
    f"{HOSTILE}test_it_connects_nowhere_directly",
    # item 2: a server that reads the workspace itself
    "tests/brokerd/mcp/test_reads_all.py::test_a_server_that_reads_the_file_itself",
    # item 8: /proc read as a plain uid; children in a session of their own, orphans
    f"{MEMORY}{STOPPED}[setsid-4-40]",
    f"{MEMORY}{STOPPED}[orphan-4-40]",
    # item 4: the grants file opened by the home-file rules, as its owner
    f"{EDIT}[a FIFO]",
    f"{EDIT}[a link to /dev/zero]",
    f"{EDIT}[cut mid-line]",
    # item 3: "always" written into the owner's grants file
    f"{FETCH}[http://127.0.0.1:{{p}}/page]",
    # a refusal tells nothing of what is there, though brokerd cannot read everything
    f"{REFUSAL}[read_file-secrets/key-secrets/nokey]",
    f"{REFUSAL}[list_dir-secrets/deep-secrets/shallow]",
]
# With CAP_CHOWN ambient: each path that starts a sandbox (bwrap refuses a capability) or
# writes the owner's files.
TWO_USERS = [
    "tests/brokerd/sandbox/test_setid.py::test_no_set_id_bit_survives_a_call",
    "tests/brokerd/sandbox/test_tree_walk.py::test_a_set_id_file_in_a_folder_brokerd_cannot_read_loses_its_bit",
    f"{QUOTA}[/workspace/h/big:64:0300]",
    f"{HOSTILE}test_it_reads_no_host_file_it_was_not_given",
    f"{HOSTILE}test_a_setuid_file_planted_in_an_rw_workspace_keeps_no_setuid_bit",
    f"{HOSTILE}test_it_is_killed_with_everything_it_started",
    f"{MEMORY}{STOPPED}[setsid-4-40]",
    f"{EDIT}[a FIFO]",
    f"{FETCH}[http://127.0.0.1:{{p}}/page]",
]

# name: (uid, setpriv's capability options, the tests, how many pass)
DEPLOYMENTS = {
    "one user": (54331, [], ONE_USER, 41),
    "two users": (54332, ["--inh-caps=+chown", "--ambient-caps=+chown"], TWO_USERS, 21),
}


@pytest.mark.parametrize("chosen", [*ONE_USER, *TWO_USERS])
def test_each_chosen_test_is_where_it_is_named(chosen: str) -> None:
    """A chosen test moved or renamed fails here, on every machine, not only where root runs
    the deployments (pytest would say "not found" there, after the minutes of the others)."""
    file, _, name = chosen.partition("::")
    path = ROOT / file
    assert path.is_file(), f"{file} is gone: update this module's lists to where it moved"
    function = name.partition("[")[0]
    assert not function or f"def {function}(" in path.read_text("utf-8"), (
        f"{file} has no {function}: update this module's lists"
    )


@NEEDS_ROOT
@pytest.mark.skipif(not _same_python(), reason=f"{SYSTEM_PYTHON} is not the venv's Python")
@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_the_security_tests_hold_under(deployment: str) -> None:
    uid, caps, chosen, passing = DEPLOYMENTS[deployment]
    base = Path(tempfile.mkdtemp(prefix="bk-dep-", dir="/tmp"))
    try:
        os.chown(base, uid, uid)
        os.chmod(base, 0o755)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(base),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": f"{ROOT}:{sysconfig.get_paths()['purelib']}",
        }
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *caps]
        argv += [SYSTEM_PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        argv += [f"--basetemp={base / 't'}", *chosen]
        done = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        tail = "\n".join(done.stdout.splitlines()[-40:])
        assert done.returncode == 0, f"{deployment}:\n{tail}\n{done.stderr[-2000:]}"
        counts = dict(
            (word, int(n)) for n, word in re.findall(r"(\d+) (passed|skipped|failed)", tail)
        )
        # every chosen test ran; the one skip is test_tree_walk's folder of another uid
        assert counts.get("passed", 0) == passing, tail
        assert counts.get("skipped", 0) == (1 if chosen is ONE_USER else 0), tail
    finally:
        shutil.rmtree(base, ignore_errors=True)
