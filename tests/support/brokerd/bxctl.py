"""A real brokerd as bxctl's approval tests start it (its own config, grants and workspace), and
the scripted turns that call its tools."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from boxmaker._framed import FramedClient
from boxmaker._toml import toml_dumps
from boxmaker.proto import ApprovalNeededEvent
from boxmaker.proto.broker import OWNER_KINDS
from tests.support.brokerd.rig import serve_loopd
from tests.support.procs import Daemon, python_module, wait_for
from tests.support.serve import BOUND_S, ServeEnv, TurnClient, serve_env

APPROVAL_MS = 1000  # brokerd's approval wait: the unanswered call ends after it


GRANTS = """
[[grant]]
tool = "read_file"
mode = "allow"

[[grant]]
tool = "write_file"
mode = "ask"
"""


class Brokerd:
    def __init__(self, folder: Path, approval_ms: int = APPROVAL_MS) -> None:
        self.folder = folder
        self.socket = folder / "run" / "broker.sock"
        self.owner_socket = folder / "run" / "owner.sock"
        self.log = folder / "broker" / "decisions.jsonl"
        self.config = folder / "brokerd.toml"
        (folder / "ws").mkdir()
        (folder / "ws" / "a.txt").write_text("alpha\n")
        (folder / "grants.toml").write_text(GRANTS)
        table = {
            "socket": str(self.socket),
            "owner_socket": str(self.owner_socket),
            "workspace": str(folder / "ws"),
            "grants": str(folder / "grants.toml"),
            "home": str(folder / "home"),
            "log": "broker/decisions.jsonl",  # relative: to the config's folder, as make run's
            "approval_timeout_ms": approval_ms,
        }
        self.config.write_text(toml_dumps({"broker": table}))
        self.daemon = Daemon(
            python_module("boxmaker.brokerd", "serve", "--config", str(self.config))
        )
        self.daemon.wait_for_line("listening on")

    def answer(self, call_id: str, answer: str) -> None:
        with FramedClient(str(self.owner_socket), OWNER_KINDS, BOUND_S) as owner:
            (claimed,) = owner.exchange("claim", {"id": call_id})
            assert claimed.kind == "call", claimed
            (reply,) = owner.exchange(
                "answer", {"id": call_id, "hash": claimed.body["hash"], "answer": answer}
            )
            assert reply.kind == "answered", reply


def needed(client: TurnClient, n: int) -> ApprovalNeededEvent:
    """The n-th approval_needed event of the turn (1-based), once it has come."""
    found = wait_for(
        lambda: (
            seen[n - 1]
            if len(seen := [f for f in client.frames if isinstance(f, ApprovalNeededEvent)]) >= n
            else None
        ),
        f"approval {n}",
        BOUND_S,
    )
    assert isinstance(found, ApprovalNeededEvent)
    return found


def brokerd_stack(approval_ms: int, tool_ms: int) -> Iterator[tuple[ServeEnv, Brokerd]]:
    """A fake-server loopd environment, a real brokerd that waits `approval_ms` for the owner,
    and `loopd serve` wired to it with `tool_ms` (a fixture's body: `yield from` it)."""
    with serve_env() as env:
        broker = Brokerd(env.folder, approval_ms=approval_ms)
        env.daemons.append(broker.daemon)
        serve_loopd(env, broker.socket, tool_ms)
        yield env, broker
