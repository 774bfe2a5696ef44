"""Coverage-guided fuzzing with atheris (STYLE.md R3's `fuzz/`, outside CI): `make fuzz` runs it.

    PYTHONPATH=. python fuzz/run_atheris.py <target> [libFuzzer flags, e.g. -runs=200000]

Targets: frame, sse-py, sse-c, chunked-py, chunked-c. Each input is split by atheris into caps,
cut points and the stream; the invariant is the Hypothesis fuzz tests' own, imported from them so
the two cannot drift (tests/fast/test_fuzz.py, tests/proto/test_frame_fuzz.py): it parses or
raises the module's own error, errors are final, held bytes stay within the caps, and the split
changes nothing. Anything else escapes and atheris reports it as a crash, with the input saved.
The pure-Python code is instrumented for coverage; the compiled twins are fed blind (they are not
built with libFuzzer's instrumentation), which still finds crashes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import atheris

with atheris.instrument_imports(include=["boxmaker"]):
    from boxmaker._fast import _chunked_c, _chunked_py, _sse_c, _sse_py
    from tests.fast.test_fuzz import assert_same_chunked, assert_same_outcome, chunked_run, sse_run
    from tests.proto.test_frame_fuzz import run as frame_run
    from tests.support.feed import pieces_at

SSE_LINE_CAPS = [1, 2, 5, 16, 64, 1_048_576]
SSE_EVENT_CAPS = [1, 3, 8, 40, 4_194_304]
CHUNKED_CAPS = [3, 4, 5, 8, 16, 4096]
FRAME_CAPS = [1, 2, 8, 30, 64, 1_048_576]
FRAME_DEPTHS = [2, 3, 128]


def sse(cls: type) -> Callable[[bytes], None]:
    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        line_cap = fdp.PickValueInList(SSE_LINE_CAPS)
        event_cap = fdp.PickValueInList(SSE_EVENT_CAPS)
        cuts = [fdp.ConsumeIntInRange(0, 4096) for _ in range(fdp.ConsumeIntInRange(0, 8))]
        stream = fdp.ConsumeBytes(fdp.remaining_bytes())
        whole = sse_run(cls, line_cap, event_cap, [stream])
        assert_same_outcome(whole, sse_run(cls, line_cap, event_cap, pieces_at(stream, cuts)))

    return one


def chunked(cls: type) -> Callable[[bytes], None]:
    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        cap = fdp.PickValueInList(CHUNKED_CAPS)
        cuts = [fdp.ConsumeIntInRange(0, 4096) for _ in range(fdp.ConsumeIntInRange(0, 8))]
        stream = fdp.ConsumeBytes(fdp.remaining_bytes())
        whole = chunked_run(cls, cap, [stream])
        cut = chunked_run(cls, cap, pieces_at(stream, cuts))
        assert_same_chunked(whole, cut)

    return one


def frame(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    cap = fdp.PickValueInList(FRAME_CAPS)
    depth = fdp.PickValueInList(FRAME_DEPTHS)
    cuts = [fdp.ConsumeIntInRange(0, 4096) for _ in range(fdp.ConsumeIntInRange(0, 8))]
    stream = fdp.ConsumeBytes(fdp.remaining_bytes())
    whole = frame_run([stream], cap, depth)
    assert frame_run(pieces_at(stream, cuts), cap, depth) == whole


TARGETS: dict[str, Callable[[bytes], None]] = {
    "frame": frame,
    "sse-py": sse(_sse_py.SSELineSplitter),
    "sse-c": sse(_sse_c.SSELineSplitter),
    "chunked-py": chunked(_chunked_py.ChunkedDecoder),
    "chunked-c": chunked(_chunked_c.ChunkedDecoder),
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: run_atheris.py {{{','.join(TARGETS)}}} [libFuzzer flags]")
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
