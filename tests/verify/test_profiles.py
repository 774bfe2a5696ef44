"""Each model profile's loopd and brokerd configs agree on the owner's time to answer: a call
waiting for approval is cut by neither loopd's tool_timeout_ms nor its broker_timeout_ms before
brokerd's approval_timeout_ms (issue 28: at loopd's default 30 s, `make run MODEL=qwen-coder`
cancelled a write the chat was still asking about)."""

from __future__ import annotations

import os

import pytest

from boxmaker.brokerd.config import parse_config
from boxmaker.loopd.config import load_config
from boxmaker.verify.profile import load_profile, names


@pytest.mark.parametrize("name", names())
def test_a_call_waiting_for_the_owner_outlives_the_approval_timeout(name: str) -> None:
    profile = load_profile(name)
    loopd = load_config(profile.loopd_config)
    path = profile.brokerd_config
    brokerd = parse_config(path.read_bytes(), os.path.dirname(path))
    assert loopd.loop.tool_timeout_ms > brokerd.approval_timeout_ms, name
    assert loopd.tools.broker_timeout_ms > brokerd.approval_timeout_ms, name
