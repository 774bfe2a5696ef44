"""The start-up self-test, in one place (issue 20 item 3).

`checks`: the three checks (M2a brief, section 5), their pure judges, their requests and
`iter_selftest`, the shell that asks the server. `run`: `run_selftest`, the one entry point that
`loopd serve` and `loopd selftest` call: the slot the checks run on, the slot-save probe (with
`[cache] slot_save`), the prompt rate the cache keeper's after-turn rule needs, and the lines.
"""

from .checks import (
    CACHE,
    CHECKS,
    PROPS,
    TOOL_CALL,
    CheckResult,
    SelftestClient,
    cache_requests,
    failed_to_ask,
    iter_selftest,
    judge_cache,
    judge_props,
    judge_tool_call,
    tool_call_request,
)
from .run import Outcome, open_keeper, run_selftest

__all__ = [
    "CACHE",
    "CHECKS",
    "PROPS",
    "TOOL_CALL",
    "CheckResult",
    "Outcome",
    "SelftestClient",
    "cache_requests",
    "failed_to_ask",
    "iter_selftest",
    "judge_cache",
    "judge_props",
    "judge_tool_call",
    "open_keeper",
    "run_selftest",
    "tool_call_request",
]
