"""Runs the benchmarks: `python -m bench [sse] [proxy] [sessions] [daemon] [slotcache] [slots]
[broker] [sandbox] [mcp] [compaction] [toolloop_save]` (all by default; slotcache, slots,
compaction and toolloop_save start the real llama-server)."""

import importlib
import sys

SUITES = (
    "sse",
    "proxy",
    "sessions",
    "daemon",
    "slotcache",
    "slots",
    "broker",
    "sandbox",
    "mcp",
    "compaction",
    "toolloop_save",
)


def main(argv: list[str]) -> int:
    names = argv or list(SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        print(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(SUITES)}", file=sys.stderr)
        return 2
    for name in names:
        importlib.import_module(f"bench.{name}").main([])
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
