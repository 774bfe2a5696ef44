"""Rewrites tests/golden/log/ from tests/support/proto/log_cases.py. Review the diff before
committing.

Run from the checkout: `.venv/bin/python scripts/regen_golden_log.py`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from boxmaker.proto.log import GENESIS_PREV, encode_line, next_prev
from tests.support.proto.log_cases import GOLDEN_DIR, LINES, SESSION, SESSION_FILE


def main() -> int:
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for name, (seq, prev, record) in LINES.items():
        (GOLDEN_DIR / f"{name}.jsonl").write_bytes(encode_line(record, seq, prev))
        print(f"wrote {name}.jsonl")
    prev, out = GENESIS_PREV, bytearray()
    for seq, record in enumerate(SESSION):
        line = encode_line(record, seq, prev)
        out += line
        prev = next_prev(line)
    (GOLDEN_DIR / SESSION_FILE).write_bytes(bytes(out))
    print(f"wrote {SESSION_FILE}: {len(SESSION)} lines, next prev {prev}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
