"""conf/system.md against the real tokenizer: the baseline's budget counted by llama-server."""

from pathlib import Path

import pytest

from boxmaker.session.baseline import assemble_baseline, check_budget
from boxmaker.session.errors import BaselineTooLarge
from tests.support.session.session_cases import CALL_TOOL, CLOCK, FIND, SYSTEM_MD
from tests.support.stack import Stack


def test_conf_system_md_is_within_budget_by_the_real_tokenizer(
    single_stack: Stack, tmp_path: Path
) -> None:
    client = single_stack.client()

    def count(text: str) -> int:
        return len(client.tokenize(text))

    baseline = assemble_baseline(SYSTEM_MD, tmp_path, [CLOCK, FIND, CALL_TOOL])
    n = check_budget(baseline, count)
    assert 100 < n <= 3000
    # With a long core memory the same check fails: the counter is really counting.
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "core.md").write_text("The owner likes tea. " * 800)
    with pytest.raises(BaselineTooLarge):
        check_budget(assemble_baseline(SYSTEM_MD, tmp_path, [CLOCK, FIND, CALL_TOOL]), count)
