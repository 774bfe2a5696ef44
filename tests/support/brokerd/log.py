"""The decision log's test helpers: a busy log, a re-chained one, a Broker's config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from boxmaker.brokerd.config import BrokerConfig
from boxmaker.proto.hash import sha256_hex
from boxmaker.session.chain import GENESIS_PREV, encode_line, verify_chain
from tests.support.brokerd.approvals import ASK_WRITES, Call, owner_says
from tests.support.brokerd.rig import Rig


def busy_log(rig: Rig) -> None:
    """One of each: allow, deny (no grant), bad path, bad arguments, ask+yes, ask+no, always."""
    rig.grants_text = ASK_WRITES
    rig.start()
    rig.call("read_file", {"path": "missing.txt"})
    rig.call("list_dir", {"path": "."})
    rig.call("read_file", {"path": "../x"})
    rig.call("read_file", '{"path": 1}')
    for answer in ("yes", "no", "always"):
        call = Call(rig, "write_file", {"path": f"{answer}.txt", "content": answer})
        owner_says(rig, call.wait_needed()["id"], answer)
        call.result()
    rig.call("write_file", {"path": "always.txt", "content": "again, no question"})
    rig.stop()


def rechain(lines: list[dict[str, object]]) -> bytes:
    """The lines written again with every hash recomputed: an edit the chain alone cannot see."""
    data, prev = b"", GENESIS_PREV
    for seq, obj in enumerate(lines):
        fields = {k: v for k, v in obj.items() if k not in ("type", "seq", "prev")}
        line = encode_line(str(obj["type"]), seq, prev, fields)
        data += line
        prev = sha256_hex(line)
    return data


def forged(log: bytes, edit: Callable[[list[dict[str, Any]]], None]) -> bytes:
    """The log edited, every hash of its chain recomputed: an edit the chain alone cannot see
    (as tests/brokerd/log/test_log.py forges brokerd's own lines)."""
    records, _ = verify_chain(log)
    edit(records)
    return rechain(records)


ROTATE = 64 << 10


GRANTS = b"".join(
    b'[[grant]]\ntool = "%s"\nmode = "allow"\n\n' % t for t in (b"read_file", b"write_file")
)


def config(base: Path, rotate: int = ROTATE) -> BrokerConfig:
    (base / "ws").mkdir(exist_ok=True)
    (base / "grants.toml").write_bytes(GRANTS)
    return BrokerConfig(
        socket=str(base / "b.sock"),
        owner_socket=str(base / "o.sock"),
        workspace=str(base / "ws"),
        grants=str(base / "grants.toml"),
        home=str(base / "home"),
        log=str(base / "log" / "decisions.jsonl"),
        log_rotate_bytes=rotate,
        approval_timeout_ms=50,  # nobody answers: an asked call is denied at once
    )
