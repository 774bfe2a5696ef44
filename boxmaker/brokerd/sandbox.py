"""The sandbox `shell` runs in: bubblewrap (`bwrap`), built anew for each call.

What the command sees (docs/decisions/sandbox.md says why each line is there):
- its own user, pid, network, ipc, uts and cgroup namespaces: no network device but `lo`, no
  other process, killed with its init;
- the workspace read-write at /workspace, nosuid and nodev (bwrap's binds are), and every
  set-uid/set-gid bit under it cleared after each call (`Sandbox.after_call`); /usr read-only
  (with /bin, /lib... as the host has them); a few files of /etc read-only, never /etc/shadow;
  its own /proc; a minimal /dev, read-only but for a size-capped /dev/shm; a size-capped tmpfs
  at /tmp; no /home, /root, /run, /sys, /var: no broker or loopd socket, no log;
- a fixed environment (PATH, HOME=/tmp, LANG, TMPDIR); nothing of brokerd's;
- limits on CPU time, address space, file size and open files (set by util-linux's prlimit,
  which then execs bwrap: all inherit them), processes (a second prlimit inside, below), a
  wall-clock timeout that kills the lot, an output cap, a write quota on the workspace
  (quota.py), and a cancel: loopd giving up on the call kills it (`run`'s `cancelled`);
- no capability: the spawning thread's ambient set is emptied first.

RLIMIT_NPROC counts the tasks of a uid in a user namespace, and the kernel never applies it to
uid 0. So when brokerd runs as root the sandbox drops to `run_as` (default: nobody) before bwrap
starts; otherwise it runs as brokerd's own uid. The limit is set by a second prlimit inside the
sandbox's user namespace, where only the sandbox's tasks count: brokerd's threads (one per held
call) and the owner's other processes cannot use it up (test_nproc). On a kernel before 5.14 the
count was per uid only.

When bwrap is missing or the kernel refuses its namespaces, `run` refuses with that reason: a
command never runs outside the sandbox.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

from boxmaker._config.kinds import integer
from boxmaker._config.walker import check_fields
from boxmaker.brokerd.paths import closed_folder
from boxmaker.brokerd.quota import WriteQuota
from boxmaker.brokerd.tree import clear_set_id

MOUNT_POINT = "/workspace"
ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
}
# Top-level links and folders of a merged-/usr or a split system; whichever exist are given.
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What a shell and the usual tools read in /etc. No shadow, no ssh keys, no resolv.conf (there is
# no network to resolve on), no machine-id.
ETC_FILES = (
    "/etc/alternatives",  # Debian's tool links (awk, editor...) point in here
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",  # names for uids (ls -l, id); the hashes are in shadow, which is not here
    "/etc/group",
)
READ_CHUNK = 65536
CANCEL_POLL_S = 0.05  # how often a running command looks whether loopd gave up on it
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_libc = ctypes.CDLL(None, use_errno=True)


def clear_ambient_capabilities() -> None:
    """Empties this thread's ambient capability set (a thread's credentials are its own, and the
    child of a spawn inherits the spawning thread's). The documented two-user start gives brokerd
    CAP_CHOWN as an ambient capability; left there it passes to prlimit and bwrap through exec,
    and bwrap, not set-uid, refuses to run with capabilities ("Unexpected capabilities")."""
    if _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_CAP_AMBIENT_CLEAR_ALL): {os.strerror(err)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxLimits:
    """The per-call limits, and shell's section `[broker.shell]`: each key's bounds, once."""

    # RLIMIT_AS, _NPROC, _FSIZE: memory_bytes, processes, file_bytes; past output_bytes or
    # write_bytes (added to the workspace) the command is killed; tmp_, shm_bytes: the tmpfs.
    timeout_ms: Annotated[int, integer(100, 3_600_000, "milliseconds")] = 30_000
    cpu_seconds: Annotated[int, integer(1, 3600, "seconds")] = 30
    memory_bytes: Annotated[int, integer(64 << 20, 64 << 30, "bytes")] = 1 << 30
    processes: Annotated[int, integer(8, 65536, "tasks")] = 64
    file_bytes: Annotated[int, integer(1 << 10, 1 << 40, "bytes")] = 64 << 20
    open_files: Annotated[int, integer(16, 65536, "descriptors")] = 256
    output_bytes: Annotated[int, integer(1 << 10, 64 << 20, "bytes")] = 64 << 10
    tmp_bytes: Annotated[int, integer(1 << 20, 16 << 30, "bytes")] = 64 << 20
    shm_bytes: Annotated[int, integer(1 << 20, 16 << 30, "bytes")] = 16 << 20
    write_bytes: Annotated[int, integer(1 << 20, 1 << 40, "bytes")] = 256 << 20

    def __post_init__(self) -> None:  # a limit made in code is held to the same bounds
        check_fields(self, "sandbox limit")


@dataclass(frozen=True, slots=True)
class ShellResult:
    """What one `shell` call gave. `refused` is set (and nothing ran) when no sandbox could be
    built; `cut` when the output passed the cap; `timed_out` when the wall clock ran out."""

    output: str = ""
    exit_code: int | None = None
    cut: bool = False
    timed_out: bool = False
    refused: str | None = None
    elapsed_ms: int = 0
    cancelled: bool = False  # killed because loopd gave up on the call
    wrote: int = 0  # what the call added to the workspace (bytes allocated), when over quota
    quota: int = 0  # the quota it passed; 0: not passed
    uncounted: str | None = None  # why its writes could not be counted (it was stopped)

    @property
    def stopped(self) -> bool:
        """Killed by brokerd (the output cap, the clock or the write quota): no exit status."""
        return self.exit_code is None

    @property
    def text(self) -> str:
        """The output with a last line that says how the command ended (what the model reads)."""
        if self.refused is not None:
            return f"shell refused: {self.refused}"
        notes = []
        if self.cut:
            notes.append("output cut at the cap; the command was stopped")
        if self.timed_out:
            notes.append(f"killed after the timeout ({self.elapsed_ms} ms)")
        if self.cancelled:
            notes.append("killed: loopd gave up on the call (its tool timeout)")
        if self.quota:
            stop = "; the command was stopped" if self.stopped else ""
            notes.append(
                f"it added {self.wrote} bytes to the workspace, over the quota of {self.quota} "
                f"([broker.shell] write_bytes){stop}"
            )
        if self.uncounted:
            notes.append(f"its writes cannot be counted ({self.uncounted}); it was stopped")
        if self.exit_code is not None:
            notes.append(f"exit status {self.exit_code}")
        tail = "[" + "; ".join(notes) + "]"
        sep = "\n" if self.output and not self.output.endswith("\n") else ""
        return f"{self.output}{sep}{tail}"


def default_run_as() -> tuple[int, int] | None:
    """The uid and gid the sandbox drops to: nobody when brokerd is root, else None (its own)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


class Sandbox:
    """Runs commands under bwrap in one workspace. `probe()` once, then `run()` per call."""

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        limits: SandboxLimits | None = None,
        *,
        bwrap: str | None = None,
        run_as: tuple[int, int] | None = None,
    ) -> None:
        self.workspace = Path(workspace)
        self.limits = limits or SandboxLimits()
        self.bwrap = bwrap if bwrap is not None else shutil.which("bwrap")
        self.prlimit = shutil.which("prlimit")
        self.run_as = run_as if run_as is not None else default_run_as()
        self._unavailable: str | None = None
        self._probed = False

    def argv(self, command: str) -> list[str]:
        """The bwrap command line for one call (public so the tests and the doc can show it)."""
        return self.command_line(["/bin/sh", "-c", command])

    def command_line(self, program: list[str]) -> list[str]:
        """prlimit + bwrap + the inner prlimit around `program` (argv inside the sandbox): what
        a long-running sandboxed process (an MCP server) is started with too. Spawn it from a
        thread that called `clear_ambient_capabilities()`, with `run_as`'s uid when set, and
        `start_new_session` so one killpg ends it; `after_call()` once it has stopped."""
        assert self.bwrap is not None
        assert self.prlimit is not None
        # prlimit sets the limits and execs bwrap, which all inherit them; no preexec_fn, which
        # is unsafe in a threaded brokerd.
        lim = self.limits
        args = [self.prlimit, f"--cpu={lim.cpu_seconds}", f"--as={lim.memory_bytes}"]
        args += [f"--fsize={lim.file_bytes}", f"--nofile={lim.open_files}", "--core=0", "--"]
        args += [self.bwrap, "--unshare-all", "--unshare-user", "--die-with-parent"]
        args += ["--new-session", "--hostname", "sandbox", "--disable-userns"]
        args += ["--ro-bind", "/usr", "/usr"]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for path in ETC_FILES:
            args += ["--ro-bind-try", path, path]
        # bwrap's /dev is a tmpfs with no size: read-only, but for a capped /dev/shm.
        args += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
        args += ["--size", str(lim.shm_bytes), "--tmpfs", "/dev/shm"]
        args += ["--size", str(self.limits.tmp_bytes), "--tmpfs", "/tmp"]
        args += ["--bind", str(self.workspace), MOUNT_POINT, "--chdir", MOUNT_POINT]
        args += ["--remount-ro", "/"]  # the root bwrap builds is a tmpfs; nothing may land there
        args += ["--clearenv"]
        for key, value in ENVIRONMENT.items():
            args += ["--setenv", key, value]
        # RLIMIT_NPROC is set inside, once bwrap made the user namespace: the kernel counts it
        # per user namespace (Linux 5.14+), so there it counts the sandbox's own tasks, never
        # brokerd's threads or the uid's other processes (set before, it would be checked against
        # all of them: 150 held calls switched shell off).
        inner = [self.prlimit, f"--nproc={lim.processes}", "--"]
        return [*args, "--", *inner, *program]

    def probe(self) -> str | None:
        """None when a sandbox can be built here, else why not (remembered for later calls)."""
        if self._probed:
            return self._unavailable
        self._probed = True
        self._unavailable = self._why_not()
        return self._unavailable

    def _why_not(self) -> str | None:
        if self.bwrap is None:
            return (
                "bubblewrap (bwrap) is not installed; install Debian's package `bubblewrap` "
                "(make install does when run as root)"
            )
        if self.prlimit is None:
            return "prlimit (util-linux) is not installed; the sandbox's limits need it"
        if os.geteuid() == 0 and self.run_as is None:
            return "brokerd runs as root and no unprivileged uid is set for the sandbox"
        if not self.workspace.is_dir():
            return f"the workspace {self.workspace} is not a directory"
        if self.run_as is not None and (closed := closed_folder(self.workspace, *self.run_as)):
            uid, gid = self.run_as
            return (
                f"the sandbox's uid {uid} cannot reach the workspace {self.workspace}: {closed}; "
                f"let it pass (chmod o+x on that folder) and write the workspace (chown {uid}:{gid}"
                f" {self.workspace}), or put the workspace under folders it can pass; then "
                "restart brokerd"
            )
        # The workspace must be writable from inside: exit 3 is ours, anything else is bwrap's.
        result = self._spawn_and_collect(f"test -w {MOUNT_POINT} || exit 3", self.limits.timeout_ms)
        if result.exit_code == 3:
            uid, gid = self.run_as if self.run_as is not None else (os.geteuid(), os.getegid())
            return (
                f"the sandbox's uid {uid} cannot write the workspace {self.workspace}; let it "
                f"(chown {uid}:{gid} {self.workspace}), then restart brokerd"
            )
        if result.exit_code != 0:
            detail = result.output.strip().splitlines()
            cause = detail[-1] if detail else f"exit status {result.exit_code}"
            if "capabilities" in cause:  # bwrap's "Unexpected capabilities but not setuid"
                return (
                    f"bwrap cannot build the sandbox ({cause}); brokerd passed it capabilities: "
                    "start brokerd as docs/operations.md says"
                )
            return (
                f"bwrap cannot build the sandbox ({cause}); the kernel must allow user "
                "namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces > 0) and the sandbox's uid must reach the workspace"
            )
        return None

    def run(
        self,
        command: str,
        timeout_ms: int | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> ShellResult:
        """Runs `/bin/sh -c command` in the sandbox. Never raises for the command's sake.
        `cancelled` is asked every CANCEL_POLL_S while the command runs: True kills it (loopd
        gave up on the call)."""
        reason = self.probe()
        if reason is not None:
            return ShellResult(refused=reason)
        cap = self.limits.timeout_ms
        wanted = cap if timeout_ms is None else max(1, min(timeout_ms, cap))
        quota = WriteQuota(str(self.workspace), self.limits.write_bytes)
        result = self._spawn_and_collect(command, wanted, quota, cancelled)
        return replace(result, output=result.output + self.after_call())

    def after_call(self) -> str:
        """What is done to the workspace once a command ended: its set-id bits cleared (the mount
        is nosuid inside, but not outside, where loopd's uid may run what the command made).
        "" or a line for the result saying what could not be done."""
        try:
            clear_set_id(str(self.workspace))
        except OSError as exc:
            return f"\n[brokerd could not clear set-id bits under {self.workspace}: {exc}]"
        return ""

    def _spawn_and_collect(
        self,
        command: str,
        timeout_ms: int,
        quota: WriteQuota | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> ShellResult:
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        user, group = self.run_as if self.run_as is not None else (None, None)
        try:
            clear_ambient_capabilities()
            proc = subprocess.Popen(
                self.argv(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={},
                cwd="/",
                close_fds=True,
                start_new_session=True,  # bwrap leads its own group: one killpg ends it
                user=user,
                group=group,
                extra_groups=[] if user is not None else None,
            )
        except OSError as err:
            return ShellResult(refused=f"bwrap could not start: {err}")
        assert proc.stdout is not None
        chunks: list[bytes] = []
        size = 0
        cut = timed_out = over = cancel = False
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                wait = deadline - now
                if wait <= 0:
                    timed_out = True
                    break
                if quota is not None:
                    if now >= quota.next_check and quota.over():
                        over = True
                        break
                    wait = min(wait, max(0.0, quota.next_check - now))
                if cancelled is not None:
                    if cancelled():
                        cancel = True
                        break
                    wait = min(wait, CANCEL_POLL_S)
                if not sel.select(wait):
                    continue
                chunk = os.read(proc.stdout.fileno(), READ_CHUNK)
                if not chunk:
                    break
                room = self.limits.output_bytes - size
                chunks.append(chunk[:room])
                size += min(len(chunk), room)
                if len(chunk) > room:
                    cut = True
                    break
        proc.stdout.close()
        stopped = cut or timed_out or over or cancel
        if not stopped:
            # bwrap holds the pipe too, so the end of output means it exited; should that ever
            # change, a command that closed its output still meets the clock.
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = stopped = True
        if stopped:
            _kill_group(proc)
        code = proc.wait()
        if quota is not None and not over:
            over = quota.over()  # what it wrote since the last check, or before it ended
        return ShellResult(
            output=b"".join(chunks).decode("utf-8", "replace"),
            exit_code=None if stopped else code,
            cut=cut,
            timed_out=timed_out,
            cancelled=cancel,
            elapsed_ms=int((time.monotonic() - started) * 1000),
            wrote=quota.used if quota is not None else 0,
            quota=quota.limit if over and quota is not None and quota.used > quota.limit else 0,
            uncounted=quota.failed if quota is not None else None,
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # bwrap's group holds bwrap; its child, the sandbox's pid 1, dies with it (PDEATHSIG), and
    # the kernel kills every process of a pid namespace whose init has died.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
