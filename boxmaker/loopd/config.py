"""loopd's config file (`loopd.toml`): TOML text into frozen, typed dataclasses.

Each key is declared once below, `name: Annotated[type, Kind] = default`; its `Kind`
(boxmaker/_config/kinds.py) says what the value must be, and checks it, within a maximum. The
walker (_config/walker.py) reads every section against its dataclass: unknown keys are errors;
types are exact; a key with no default is required; relative paths resolve against the file's
folder; `_relations` checks keys against each other. An error is one line naming the file and
the dotted key. `parse_config` is a core; `load_config` reads the file (at most 1 MiB)."""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from boxmaker._config.kinds import (
    BOOL,
    BYTES,
    DELAYS_MS,
    JSON_TABLE,
    MAX_BYTES,
    MAX_JSON_DEPTH,
    MAX_MS,
    MAX_SLOTS,
    MAX_TOKENS,
    MS,
    PATH,
    SLOT_IDS,
    SOCKET,
    TEXT,
    TOKENS,
    UIDS,
    ConfigError,
    Ctx,
    Env,
    choice,
    integer,
    list_of,
    number,
    text,
)
from boxmaker._config.readfile import read_bounded
from boxmaker._config.walker import build, parse_toml
from boxmaker._daemon import MAX_UNIX_SOCKET_PATH_BYTES
from boxmaker._defaults import DEFAULT_HOME, DEFAULT_SOCKET, HOME_ENV

__all__ = [
    "MAX_BYTES",
    "MAX_CONFIG_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_MS",
    "MAX_SLOTS",
    "MAX_TOKENS",
    "MAX_UNIX_SOCKET_PATH_BYTES",
    "BaselineConfig",
    "CacheConfig",
    "ChannelConfig",
    "Config",
    "ConfigError",
    "ConfigSource",
    "ExpectConfig",
    "InferenceConfig",
    "LoopConfig",
    "PathsConfig",
    "SamplingConfig",
    "SelftestConfig",
    "load_config",
    "parse_config",
    "read_config",
]

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: a full config is a few KiB
TEMPERATURE = number(0.0, 100.0)


# A key is `name: Annotated[type, Kind, "what it is" (optional), Env(...) (optional)] = default`;
# without a default it is required. A field whose type is a dataclass is a sub-table.


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingConfig:
    """[inference.sampling]: sent to the server only when set (None means "not sent")."""

    temperature: Annotated[float | None, TEMPERATURE] = None
    top_p: Annotated[float | None, number(0.0, 1.0)] = None
    top_k: Annotated[int | None, integer(0, MAX_TOKENS)] = None
    min_p: Annotated[float | None, number(0.0, 1.0)] = None
    repeat_penalty: Annotated[float | None, number(0.0, 100.0, lo_open=True)] = None
    seed: Annotated[int | None, integer(0, 2**32 - 1)] = None

    def params(self) -> dict[str, float | int]:
        """The settings that are set, by their request field names, in declaration order."""
        pairs = ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))
        return {name: value for name, value in pairs if value is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceConfig:
    """[inference]: the way to llama-server and every limit of the M2a brief's section 4."""

    socket: Annotated[Path, SOCKET, "the path of infer.sock"]
    model: Annotated[str, TEXT, "the model id sent upstream"]
    slots: Annotated[tuple[int, ...], SLOT_IDS] = (0,)
    poll_ms: Annotated[int, MS] = 5000
    busy_wait_ms: Annotated[int, MS] = 600_000
    load_wait_ms: Annotated[int, MS] = 180_000
    idle_grace_ms: Annotated[int, MS] = 30_000
    liveness_ms: Annotated[int, MS] = 30_000
    thinking_cap: Annotated[int, TOKENS] = 4096
    thinking_overrun: Annotated[int, integer(0, MAX_TOKENS, "tokens")] = 256
    max_tokens: Annotated[int, TOKENS] = 8192
    parallel_tool_calls: Annotated[bool | None, BOOL] = None  # sent with tools when set
    queue_length: Annotated[int, integer(0, 1024, "requests waiting per slot")] = 8
    # A new session's slot (issue 19): "spread", the fewest sessions active in slot_window_ms,
    # then least busy, then least recently used; "first", slots[0] (`make bench`'s comparison).
    slot_choice: Annotated[str, choice("spread", "first")] = "spread"
    slot_window_ms: Annotated[int, MS] = 600_000
    retry_attempts: Annotated[int, integer(1, 100, "attempts in all, the first included")] = 4
    retry_delays_ms: Annotated[tuple[int, ...], DELAYS_MS] = (2000, 8000, 30_000)
    retry_jitter: Annotated[float, number(0.0, 1.0, hi_open=True)] = 0.25
    retry_total_ms: Annotated[int, MS] = 300_000
    max_header_bytes: Annotated[int, BYTES] = 16_384
    max_sse_line_bytes: Annotated[int, BYTES] = 1_048_576
    max_body_bytes: Annotated[int, BYTES] = 4_194_304
    # The calls on a second connection (/slots, the control call), and the main request's connect.
    control_timeout_ms: Annotated[int, MS] = 5000
    # A request inferproxy dropped unread (over its accept budget) is made again after this: a
    # short call until load_wait_ms, a completion's connection until control_timeout_ms. One
    # token of the budget (--accept-rate 2/s) comes back in 500 ms (docs/decisions/proxy-budget.md).
    refused_retry_ms: Annotated[int, MS] = 500
    # ---- what one response may hold (issue 9): past any of these the stream is a protocol error
    # (not retried). Far above what a real model produces; they exist so that no server can make
    # loopd hold without bound.
    max_interim_heads: Annotated[int, integer(0, 1_000, "1xx heads before a response")] = 8
    max_content_bytes: Annotated[int, BYTES] = 4_194_304
    max_reasoning_bytes: Annotated[int, BYTES] = 4_194_304
    max_tool_calls: Annotated[int, integer(1, 1_000_000, "tool calls per completion")] = 128
    max_tool_call_bytes: Annotated[int, BYTES] = 1_048_576  # ids, names and arguments together
    # ---- end of the response caps
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def _relations(self) -> Iterator[tuple[str, str]]:
        waits = self.retry_attempts - 1
        if len(self.retry_delays_ms) != waits:
            yield (
                "retry_delays_ms",
                (
                    f"must hold one wait before each retry: retry_attempts = {self.retry_attempts} "
                    f"needs {waits}, got {len(self.retry_delays_ms)}"
                ),
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpectConfig:
    """[expect]: what the self-test requires of the server's /props."""

    chat_template_sha256: Annotated[
        str,
        text("64 lowercase hex digits", r"[0-9a-f]{64}"),
        "the SHA-256 of /props chat_template",
    ]
    n_ctx: Annotated[int, TOKENS, "the per-slot context size"]
    total_slots: Annotated[int, integer(1, MAX_SLOTS), "the server's slot count"]


_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "timezone": {"type": "string", "description": "An IANA time zone name, e.g. Europe/Paris."}
    },
    "required": ["timezone"],
}
_TOOL_NAME = text("a tool name of 1 to 64 letters, digits, _ or -", r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SelftestConfig:
    """[selftest]: what the tool-call and cache checks send; the defaults force nothing."""

    prompt: Annotated[str, TEXT] = (
        "What time is it in Europe/Paris right now? Use the get_time tool."
    )
    tool_name: Annotated[str, _TOOL_NAME] = "get_time"
    tool_description: Annotated[str, TEXT] = "Returns the current time in a time zone."
    # A JSON schema. A dict can't be frozen or hashed: it is left out of hash(); don't mutate it.
    tool_parameters: Annotated[dict[str, Any], JSON_TABLE] = field(
        default_factory=lambda: copy.deepcopy(_TOOL_PARAMETERS), hash=False
    )
    # "none" is left out: with it the tool-call check could never pass.
    tool_choice: Annotated[str, choice("auto", "required")] = "auto"
    prefill: Annotated[str | None, TEXT] = None
    stop: Annotated[
        tuple[str, ...] | None, list_of(TEXT, "a non-empty list of non-empty strings")
    ] = None
    temperature: Annotated[float, TEMPERATURE] = 0.0
    parallel_tool_calls: Annotated[bool | None, BOOL] = None
    cache_first_prompt: Annotated[str, TEXT] = "Name the three primary colours, in one line."
    cache_second_prompt: Annotated[str, TEXT] = "Now name the three secondary colours, in one line."


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelConfig:
    """[channel]: where loopd listens for bxctl."""

    socket: Annotated[Path, SOCKET] = DEFAULT_SOCKET
    # On SIGTERM, turns in flight may finish within this; then they are cut.
    drain_ms: Annotated[int, MS] = 10_000
    # A session worker with no turn for this long exits; the next turn starts one from the log.
    worker_idle_ms: Annotated[int, MS] = 300_000
    # A connection that has not sent its whole `turn` frame within this is closed.
    first_frame_ms: Annotated[int, MS] = 5000
    # A client that takes longer than this to take one frame is dropped; its turn goes on.
    send_timeout_ms: Annotated[int, MS] = 30_000
    # How long a worker asked to stop may take to exit before it is killed.
    worker_stop_ms: Annotated[int, MS] = 5000
    # One worker started ahead with no session, so a new session's first turn skips the start.
    spare_worker: Annotated[bool, BOOL] = True
    # Worker processes at once (spare included; ~20 MB each): past it the longest idle is retired,
    # and when all run turns a new session's turn waits worker_wait_ms, then gets `unavailable`.
    max_workers: Annotated[int, integer(1, 4096, "worker processes")] = 16
    worker_wait_ms: Annotated[int, MS] = 30_000
    clients: Annotated[tuple[int, ...], UIDS] = ()  # other uids admitted (M4: gatewayd's user)


@dataclass(frozen=True, slots=True, kw_only=True)
class PathsConfig:
    """[paths]: where sessions live."""

    home: Annotated[Path, PATH, Env(HOME_ENV)] = DEFAULT_HOME


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopConfig:
    """[loop]: the turn loop's limits (M2b brief section 3)."""

    tool_iterations: Annotated[int, integer(1, 1000, "tool rounds per turn")] = 8
    repeat_detection: Annotated[bool, BOOL] = True
    tool_result_cap: Annotated[int, BYTES] = 16_384
    parallel_tools: Annotated[bool, BOOL] = True
    tool_timeout_ms: Annotated[int, MS] = 30_000
    # A turn that does not say (bxctl chat without --thinking/--no-thinking) asks for reasoning
    # when this is true; false for a model with no reasoning mode (its answer would land in
    # reasoning_content). nudge: turn.nudge's retries and turn.hold's held calls.
    thinking: Annotated[bool, BOOL] = True
    nudge: Annotated[bool, BOOL] = False


_CORE_LIST = list_of(_TOOL_NAME, "a list of distinct tool names", unique=True, nonempty=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolsConfig:
    """[tools]: where tool calls go (issue 22). Without broker_socket, only `clock`, answered by
    loopd itself; with it, every call goes to brokerd, which holds the authority."""

    broker_socket: Annotated[Path | None, SOCKET] = None
    # The longest wait for one frame from brokerd; above brokerd's approval_timeout_ms, since a
    # call waits there for the owner. [loop] tool_timeout_ms bounds the whole call too.
    broker_timeout_ms: Annotated[int, MS] = 180_000
    # Registry tools offered as core schemas in a new baseline, in order, before find_tool and
    # call_tool (docs/decisions/core-tools.md); one brokerd does not grant is left out.
    core: Annotated[tuple[str, ...], _CORE_LIST] = ("clock",)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactConfig:
    """[compact]: folding a session's thread into epochs when its slot fills (issue 21)."""

    enabled: Annotated[bool, BOOL] = True
    # After a completion whose cache_n + prompt_n + predicted_n reaches this share of the slot's
    # context ([expect] n_ctx), the session compacts before its next request.
    at: Annotated[float, number(0.1, 0.99)] = 0.75
    keep_turns: Annotated[int, integer(1, 1000, "whole turns kept verbatim")] = 2
    max_attempts: Annotated[int, integer(1, 10, "compactions tried per epoch")] = 2
    # A compaction that would cut less than this share of the context counts as failed.
    min_cut: Annotated[float, number(0.0, 0.95)] = 0.3
    # The next baseline must stay within its 192,000-byte read bound (issue 29.1): 16,000 owner
    # characters of 4 bytes, a 4,096-token summary at 4 characters a token and a 3,000-token
    # system text fit.
    owner_chars: Annotated[int, integer(0, 16_000, "characters")] = 1600
    summary_tokens: Annotated[int, integer(1, 4096, "tokens")] = 256  # <= [inference] max_tokens
    prewarm: Annotated[bool, BOOL] = True


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselineConfig:
    """[baseline]: the system prompt file."""

    system: Annotated[Path, PATH] = Path("system.md")


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheConfig:
    """[cache]: a session's prompt cache saved to a file and restored (issue 14, loopd/cache)."""

    # Needs llama-server's --slot-save-path; the self-test says when the server lacks it.
    slot_save: Annotated[bool, BOOL] = False
    prewarm: Annotated[bool, BOOL] = False  # free slots read the baseline at start (prewarm.py)
    # A slot's cache shorter than this is not saved: the server reads it again faster.
    min_tokens: Annotated[int, integer(0, MAX_TOKENS, "tokens")] = 256
    # A slot idle this long has its cache saved (and every slot when loopd stops); long enough
    # not to write a file per turn (7B: 50-130 KB a token, README "Slot save and restore").
    idle_save_ms: Annotated[int, MS] = 60_000
    # Issue 19: a slot is also saved right after a turn when re-reading its cache (at the prompt
    # rate measured at start-up) would cost more than this many times the save (at the save
    # cost measured on this server), so a server crash right after a turn costs nothing.
    save_factor: Annotated[int, integer(1, 1_000_000, "times")] = 10
    # Who holds each slot and what is saved, kept across restarts; <home>/slot-cache.json if unset.
    state: Annotated[Path | None, PATH] = None
    # The save folder (--slot-save-path) as loopd sees it; when set, the oldest save files past
    # max_bytes are removed. The server's own view of it is its flag: loopd only names files.
    folder: Annotated[Path | None, PATH] = None
    max_bytes: Annotated[int, integer(1, 1 << 50, "bytes")] = 16 << 30
    # A save older than this is forgotten (its file removed, with `folder` set).
    max_age_s: Annotated[int, integer(60, 10 * 365 * 86_400, "seconds")] = 30 * 86_400


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """The whole file. [inference] and [expect] are required; the other sections are optional."""

    inference: InferenceConfig
    expect: ExpectConfig
    selftest: SelftestConfig = field(default_factory=SelftestConfig)
    channel: ChannelConfig = field(default_factory=ChannelConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    compact: CompactConfig = field(default_factory=CompactConfig)

    def _relations(self) -> Iterator[tuple[str, str]]:
        total = self.expect.total_slots
        if outside := [slot for slot in self.inference.slots if slot >= total]:
            ids = f"means slot ids 0 to {total - 1}"
            yield (
                "inference.slots",
                f"holds slot {outside[0]}, but expect.total_slots = {total} {ids}",
            )


def parse_config(
    text: str, source: str, base_dir: Path, env: Mapping[str, str] | None = None
) -> Config:
    """The Config in `text` (a file named `source`, paths relative to `base_dir`, `env` for
    BOXMAKER_HOME: None means an empty one), every key given or defaulted and within its bounds.

    Raises:
        ConfigError: not TOML, an unknown key, a wrong type or value, a missing required key.
    """
    table = parse_toml(text, source)
    config: Config = build(Config, table, Ctx(source, base_dir, env if env is not None else {}))
    return config


# The environment variables a config reads (its keys' Env): all a ConfigSource carries of it.
CONFIG_ENV = (HOME_ENV,)


@dataclass(frozen=True, slots=True)
class ConfigSource:
    """A config file as read once, with its folder and the env values it reads: `parse()` gives
    the same Config in any process. loopd's workers get this, never the path (workers/wire.py)."""

    text: str
    source: str
    base_dir: Path
    env: Mapping[str, str]

    def parse(self) -> Config:
        return parse_config(self.text, self.source, self.base_dir, self.env)


def read_config(path: str | Path, env: Mapping[str, str] | None = None) -> ConfigSource:
    """Reads the config file at `path` (see load_config) without parsing it."""
    source = str(path)
    data = read_bounded(Path(path), source, MAX_CONFIG_BYTES)
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, f"not UTF-8 text (byte {exc.start})") from None
    env = os.environ if env is None else env
    used = {name: env[name] for name in CONFIG_ENV if name in env}
    return ConfigSource(content, source, Path(path).absolute().parent, used)


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """Reads the config file at `path`; relative paths in it resolve against its folder.

    `env` defaults to `os.environ`. Raises ConfigError naming the file when it is missing,
    unreadable, not a regular file, over 1 MiB, not UTF-8, or wrong in any way `parse_config`
    checks.
    """
    return read_config(path, env).parse()
