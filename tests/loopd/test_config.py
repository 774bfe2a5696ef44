"""loopd's config: defaults, strictness, error messages, paths, and the example file.

The defaults below are copied from the briefs (M2a section 4, M2b sections 3 and 8), not from the
code, so a default that drifts from the brief fails here.
"""

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from boxmaker.loopd.config import (
    Config,
    ConfigError,
    SamplingConfig,
    load_config,
    parse_config,
)
from tests.support.loopd.config import BASE, REQUIRED, SHA, error, leaf_keys, parse, set_key, text

CONF = Path(__file__).resolve().parents[2] / "conf"


# (dotted key, default) as the briefs give them.
BRIEF_DEFAULTS: list[tuple[str, Any]] = [
    ("inference.slots", (0,)),
    ("inference.poll_ms", 5000),
    ("inference.busy_wait_ms", 600_000),
    ("inference.load_wait_ms", 180_000),
    ("inference.idle_grace_ms", 30_000),
    ("inference.liveness_ms", 30_000),
    ("inference.thinking_cap", 4096),
    ("inference.thinking_overrun", 256),
    ("inference.max_tokens", 8192),
    ("inference.parallel_tool_calls", None),
    ("inference.queue_length", 8),
    ("inference.retry_attempts", 4),
    ("inference.retry_delays_ms", (2000, 8000, 30_000)),
    ("inference.retry_jitter", 0.25),
    ("inference.retry_total_ms", 300_000),
    ("inference.max_header_bytes", 16 * 1024),
    ("inference.max_sse_line_bytes", 1024 * 1024),
    ("inference.max_body_bytes", 4 * 1024 * 1024),
    ("inference.control_timeout_ms", 5000),
    ("inference.refused_retry_ms", 500),  # issue 18 (not in the briefs)
    # Issue 9's caps on one response (not in the briefs).
    ("inference.max_interim_heads", 8),
    ("inference.max_content_bytes", 4 * 1024 * 1024),
    ("inference.max_reasoning_bytes", 4 * 1024 * 1024),
    ("inference.max_tool_calls", 128),
    ("inference.max_tool_call_bytes", 1024 * 1024),
    ("inference.sampling.temperature", None),
    ("inference.sampling.top_p", None),
    ("inference.sampling.top_k", None),
    ("inference.sampling.min_p", None),
    ("inference.sampling.repeat_penalty", None),
    ("inference.sampling.seed", None),
    ("selftest.tool_name", "get_time"),
    ("selftest.tool_choice", "auto"),
    ("selftest.prefill", None),
    ("selftest.stop", None),
    ("selftest.temperature", 0.0),
    ("selftest.parallel_tool_calls", None),
    ("channel.socket", Path("/run/loop/loop.sock")),
    ("paths.home", Path("/var/lib/boxmaker")),
    ("loop.tool_iterations", 8),
    ("loop.repeat_detection", True),
    ("loop.tool_result_cap", 16 * 1024),
    # Not in the briefs: the turn-loop and serve issues name these.
    ("loop.parallel_tools", True),
    ("loop.tool_timeout_ms", 30_000),
    ("loop.thinking", True),  # the brief: a turn reasons unless it asks not to
    ("loop.nudge", False),  # issue 40: off unless a profile turns it on (qwen-coder)
    ("channel.drain_ms", 10_000),
    ("channel.worker_idle_ms", 300_000),
    ("channel.first_frame_ms", 5000),
    ("channel.send_timeout_ms", 30_000),
    ("channel.worker_stop_ms", 5000),
    ("channel.spare_worker", True),
    # Issue 24: the bound on workers.
    ("channel.max_workers", 16),
    ("channel.worker_wait_ms", 30_000),
    ("channel.clients", ()),  # M4: no other user's client (gatewayd's uid when it runs apart)
    ("baseline.system", BASE / "system.md"),
    # Issue 14: slot save/restore.
    ("cache.slot_save", False),
    ("cache.prewarm", False),
    ("cache.min_tokens", 256),
    ("cache.idle_save_ms", 60_000),
    ("cache.save_factor", 10),
    ("cache.state", None),
    ("cache.folder", None),
    ("cache.max_bytes", 16 << 30),
    # Issue 22: brokerd.
    ("tools.broker_socket", None),
    ("tools.broker_timeout_ms", 180_000),
    ("tools.core", ("clock",)),
    # Issue 21: compaction.
    ("compact.enabled", True),
    ("compact.at", 0.75),
    ("compact.keep_turns", 2),
    ("compact.max_attempts", 2),
    ("compact.min_cut", 0.3),
    ("compact.owner_chars", 1600),
    ("compact.summary_tokens", 256),
    ("compact.prewarm", True),
    # Issue 19: slots.
    ("cache.max_age_s", 30 * 86_400),
    ("inference.slot_choice", "spread"),
    ("inference.slot_window_ms", 600_000),
]


def get(config: Config, dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def test_minimal_file_gets_every_brief_default() -> None:
    config = load_config(CONF / "loopd.minimal.toml", env={})
    assert config.inference.socket == Path("/run/loop/infer.sock")
    assert config.inference.model == "SmolLM2-135M-Instruct.Q4_1"
    for dotted, default in BRIEF_DEFAULTS:
        if dotted == "baseline.system":
            default = CONF / "system.md"
        assert get(config, dotted) == default, dotted
        assert type(get(config, dotted)) is type(default), dotted


def test_minimal_text_gets_every_brief_default() -> None:
    config = parse(text())
    for dotted, default in BRIEF_DEFAULTS:
        assert get(config, dotted) == default, dotted
    assert config.selftest.tool_parameters["properties"]["timezone"]["type"] == "string"
    assert config.inference.sampling.params() == {}


def test_every_leaf_key_has_a_brief_default_or_is_listed_here() -> None:
    # A key added to the code without a default in this test (or as required) fails here.
    required = {
        "inference.socket",
        "inference.model",
        "expect.chat_template_sha256",
        "expect.n_ctx",
        "expect.total_slots",
    }
    free_text = {
        "selftest.prompt",
        "selftest.tool_description",
        "selftest.tool_parameters",
        "selftest.cache_first_prompt",
        "selftest.cache_second_prompt",
    }
    listed = {k for k, _ in BRIEF_DEFAULTS} | required | free_text
    assert set(leaf_keys()) == listed


SECTIONS = [
    "inference",
    "inference.sampling",
    "expect",
    "selftest",
    "channel",
    "paths",
    "loop",
    "baseline",
]


@pytest.mark.parametrize("section", SECTIONS)
def test_unknown_key_in_each_section_names_dotted_key_and_file(section: str) -> None:
    exc = error(set_key(f"{section}.colour", '"blue"'))
    assert exc.key == f"{section}.colour"
    assert f"unknown key {section}.colour" in str(exc)


def test_unknown_section_and_top_level_key_are_errors() -> None:
    assert error(text() + "[inferance]\nmodel = 'x'\n").key == "inferance"
    exc = error("poll_ms = 5\n" + text())
    assert exc.key == "poll_ms"
    assert "poll_ms is a key of [inference]" in str(exc)


def test_unknown_key_suggests_the_close_name() -> None:
    exc = error(text(inference="pol_ms = 10"))
    assert "unknown key inference.pol_ms; did you mean inference.poll_ms?" in str(exc)


@pytest.mark.parametrize(
    ("dotted", "value", "says"),
    [
        (
            "inference.poll_ms",
            '"5000"',
            "must be an integer from 1 to 86400000 (milliseconds, at most one day), got string",
        ),
        ("inference.poll_ms", "true", "(milliseconds, at most one day), got boolean"),
        ("inference.poll_ms", "5000.0", "(milliseconds, at most one day), got float"),
        (
            "inference.poll_ms",
            "-5",
            "must be an integer from 1 to 86400000 (milliseconds, at most one day), got -5",
        ),
        ("inference.poll_ms", "0", "(milliseconds, at most one day), got 0"),
        (
            "inference.thinking_overrun",
            "-1",
            "must be an integer from 0 to 16777216 (tokens), got -1",
        ),
        ("inference.queue_length", "false", "must be an integer from 0 to 1024"),
        ("inference.retry_attempts", "0", "must be an integer from 1 to 100"),
        (
            "inference.max_body_bytes",
            "[1]",
            "must be an integer from 1 to 1073741824 (bytes, at most 1 GiB), got array",
        ),
        (
            "inference.retry_jitter",
            "1.0",
            "must be a number from 0 up to (not including) 1, got 1.0",
        ),
        ("inference.retry_jitter", "-0.1", "got -0.1"),
        ("inference.retry_jitter", "nan", "got nan"),
        ("inference.retry_jitter", "true", "got boolean"),
        ("inference.slots", "[]", "must be a non-empty list of unique integers from 0 to 1023"),
        ("inference.slots", "[0, 0]", "got [0, 0]"),
        ("inference.slots", "[-1]", "got [-1]"),
        ("inference.slots", "0", "got integer"),
        ("inference.slots", "[true]", "got [True]"),
        ("inference.retry_delays_ms", "[2000, -1, 3]", "integers from 0 to 86400000 (milliseconds"),
        ("inference.model", "7", "must be a non-empty string, got integer"),
        ("inference.model", '""', 'got ""'),
        ("inference.socket", "1", "must be a non-empty path string"),
        ("inference.sampling.temperature", '"hot"', "must be a number from 0 to 100, got string"),
        ("inference.sampling.temperature", "inf", "got inf"),
        ("inference.sampling.top_p", "1.5", "must be a number from 0 to 1, got 1.5"),
        ("inference.sampling.top_k", "40.0", "must be an integer from 0 to 16777216, got float"),
        (
            "inference.sampling.repeat_penalty",
            "0",
            "must be a number above 0 and at most 100, got 0",
        ),
        ("inference.sampling.seed", "4294967296", "an integer from 0 to 4294967295"),
        ("expect.chat_template_sha256", f'"{SHA.upper()}"', "64 lowercase hex digits"),
        ("expect.chat_template_sha256", '"abc"', "64 lowercase hex digits"),
        ("expect.n_ctx", "0", "must be an integer from 1 to 16777216 (tokens), got 0"),
        ("expect.total_slots", "true", "got boolean"),
        ("selftest.tool_choice", '"none"', 'must be one of "auto", "required", got "none"'),
        ("selftest.tool_name", '"get time"', "a tool name of 1 to 64 letters"),
        ("selftest.tool_parameters", '"object"', "must be a table that is a JSON object"),
        ("selftest.tool_parameters", "{ a = 1979-05-27 }", "got a date at a"),
        ("selftest.stop", "[]", "must be a non-empty list of non-empty strings"),
        ("selftest.stop", '["</tool_call>", 3]', "non-empty strings"),
        ("selftest.parallel_tool_calls", "0", "must be true or false, got integer"),
        ("selftest.prefill", '""', "must be a non-empty string"),
        ("loop.repeat_detection", '"yes"', "must be true or false, got string"),
        ("loop.tool_iterations", "0", "must be an integer from 1 to 1000 (tool rounds per turn)"),
        ("channel.socket", "[]", "got array"),
        ("baseline.system", '""', "must be a non-empty path string"),
    ],
)
def test_wrong_value_names_key_and_says_what_was_expected(
    dotted: str, value: str, says: str
) -> None:
    exc = error(set_key(dotted, value))
    assert exc.key == dotted
    assert str(exc).startswith(f"conf/loopd.toml: {dotted} must be "), str(exc)
    assert says in str(exc), str(exc)


@pytest.mark.parametrize("dotted", leaf_keys())
def test_every_key_refuses_a_datetime(dotted: str) -> None:
    # Walks the schema: no kind accepts a TOML datetime, so each key must name itself.
    exc = error(set_key(dotted, "1979-05-27T07:32:00Z"))
    assert exc.key == dotted
    assert f"{dotted} must be" in str(exc)
    assert str(exc).endswith("got datetime")


def test_int_is_accepted_where_a_float_is_expected() -> None:
    config = parse(
        text(inference_sampling="temperature = 1\ntop_p = 1", selftest="temperature = 0")
    )
    assert config.inference.sampling.temperature == 1.0
    assert type(config.inference.sampling.temperature) is float
    assert type(config.selftest.temperature) is float
    assert config.inference.sampling.params() == {"temperature": 1.0, "top_p": 1.0}


def test_sampling_params_are_only_the_ones_set() -> None:
    config = parse(text(inference_sampling="seed = 42\nmin_p = 0.05\ntop_k = 0"))
    assert config.inference.sampling.params() == {"top_k": 0, "min_p": 0.05, "seed": 42}
    assert SamplingConfig().params() == {}


@pytest.mark.parametrize(
    ("content", "names"),
    [
        (
            text().replace('socket = "infer.sock"\n', ""),
            ["inference.socket (the path of infer.sock)"],
        ),
        (text().replace('model = "smol"\n', ""), ["inference.model (the model id sent upstream)"]),
        (
            f"[inference]\n{REQUIRED['inference']}",
            [
                "expect.chat_template_sha256",
                "expect.n_ctx (the per-slot context size)",
                "expect.total_slots",
            ],
        ),
        ("", ["inference.socket", "inference.model"]),
    ],
)
def test_missing_required_keys_are_named(content: str, names: list[str]) -> None:
    exc = error(content)
    assert "missing required key" in str(exc)
    for name in names:
        assert name in str(exc)
    assert exc.key == names[0].split(" ")[0]


def test_section_that_is_not_a_table_is_an_error() -> None:
    exc = error(f"loop = 3\n{text()}")
    assert exc.key == "loop"
    assert "loop must be a table ([loop]), got integer" in str(exc)
    exc = error(text(inference="sampling = 0.5"))
    assert exc.key == "inference.sampling"


def test_retry_delays_must_match_retry_attempts() -> None:
    exc = error(text(inference="retry_attempts = 3"))
    assert exc.key == "inference.retry_delays_ms"
    assert "retry_attempts = 3 needs 2, got 3" in str(exc)
    config = parse(text(inference="retry_attempts = 2\nretry_delays_ms = [50]"))
    assert config.inference.retry_delays_ms == (50,)
    assert (
        parse(text(inference="retry_attempts = 1\nretry_delays_ms = []")).inference.retry_attempts
        == 1
    )


def test_slots_must_be_below_expected_total_slots() -> None:
    assert parse(text(inference="slots = [1, 0]")).inference.slots == (1, 0)
    exc = error(text(inference="slots = [0, 2]"))
    assert exc.key == "inference.slots"
    assert "holds slot 2, but expect.total_slots = 2 means slot ids 0 to 1" in str(exc)


def test_zero_is_accepted_where_it_makes_sense() -> None:
    config = parse(
        text(
            inference="thinking_overrun = 0\nqueue_length = 0\nretry_jitter = 0\n"
            "retry_delays_ms = [0, 0, 0]",
            inference_sampling="top_k = 0\nseed = 0",
        )
    )
    assert config.inference.thinking_overrun == 0
    assert config.inference.queue_length == 0
    assert config.inference.retry_jitter == 0.0
    assert config.inference.sampling.seed == 0


def test_relative_paths_resolve_against_the_config_folder() -> None:
    config = parse(
        text(
            channel='socket = "run/loop.sock"',
            paths='home = "../home"',
            baseline='system = "prompts/system.md"',
        )
    )
    assert config.inference.socket == BASE / "infer.sock"
    assert config.channel.socket == BASE / "run/loop.sock"
    assert config.paths.home == BASE.parent / "home"  # "conf/../home" folded, as messages show it
    assert config.baseline.system == BASE / "prompts/system.md"
    absolute = parse(text(baseline='system = "/etc/boxmaker/system.md"'))
    assert absolute.baseline.system == Path("/etc/boxmaker/system.md")


def test_home_comes_from_the_environment_unless_the_file_sets_it() -> None:
    assert parse(text(), {"BOXMAKER_HOME": "/data/bx"}).paths.home == Path("/data/bx")
    assert parse(text(), {"BOXMAKER_HOME": ""}).paths.home == Path("/var/lib/boxmaker")
    in_file = parse(text(paths='home = "/opt/bx"'), {"BOXMAKER_HOME": "/data/bx"})
    assert in_file.paths.home == Path("/opt/bx")
    exc = error(text(), {"BOXMAKER_HOME": "relative/bx"})
    assert exc.key == "paths.home"
    assert "$BOXMAKER_HOME" in str(exc)
    assert "must be an absolute path" in str(exc)


def test_socket_path_too_long_for_sun_path_is_an_error() -> None:
    long_name = "s" * 120
    exc = error(text().replace('socket = "infer.sock"', f'socket = "{long_name}"'))
    assert exc.key == "inference.socket"
    assert "a Unix socket path of at most 107 bytes" in str(exc)


def test_config_is_frozen_and_hashable() -> None:
    config = parse(text())
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.inference.poll_ms = 1  # type: ignore[misc]
    assert hash(config) == hash(parse(text()))
    assert parse(text()) == config
    smaller = dataclasses.replace(config.inference, poll_ms=50)
    assert smaller.poll_ms == 50
    assert config.inference.poll_ms == 5000


def test_load_config_on_a_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=re.escape(f"{missing}: no such file")) as info:
        load_config(missing, env={})
    assert info.value.source == str(missing)
    assert info.value.key is None


def test_load_config_on_invalid_toml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "loopd.toml"
    path.write_text(text() + "[loop]\ntool_iterations = = 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert message.startswith(f"{path}: not valid TOML: ")
    bad_line = (text() + "[loop]\n").count("\n") + 1
    assert f"line {bad_line}" in message


def test_load_config_on_non_utf8_names_file(tmp_path: Path) -> None:
    path = tmp_path / "loopd.toml"
    path.write_bytes(b'[inference]\nmodel = "\xff"\n')
    with pytest.raises(ConfigError, match="not UTF-8 text \\(byte 21\\)"):
        load_config(path, env={})


def test_load_config_on_a_folder_says_it_cannot_read_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path}: cannot read it: ")):
        load_config(tmp_path, env={})


def test_load_config_resolves_against_the_file_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "loopd.toml").write_text(text(baseline='system = "sys.md"'))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BOXMAKER_HOME", "/from/env")
    config = load_config("etc/loopd.toml")  # relative path, os.environ
    assert config.inference.socket == tmp_path / "etc" / "infer.sock"
    assert config.baseline.system == tmp_path / "etc" / "sys.md"
    assert config.paths.home == Path("/from/env")
    (tmp_path / "etc" / "loopd.toml").write_text("[loop]\n")
    with pytest.raises(ConfigError, match=r"^etc/loopd\.toml: missing required key"):
        load_config("etc/loopd.toml")


def uncomment_defaults(example: str) -> str:
    # `#key = value` (no space after #) is a default; `# ...` is prose or an `e.g.` example.
    return re.sub(r"(?m)^#(?=[a-z_]+ = )", "", example)


def test_example_as_is_equals_the_defaults() -> None:
    example = load_config(CONF / "loopd.toml.example", env={})
    minimal = load_config(CONF / "loopd.minimal.toml", env={})
    assert example == minimal


def test_example_with_every_default_uncommented_equals_the_defaults() -> None:
    raw = (CONF / "loopd.toml.example").read_text()
    uncommented = uncomment_defaults(raw)
    shown = re.findall(r"(?m)^#([a-z_]+) = ", raw)
    assert len(shown) >= 30, shown  # the regex found the default lines
    config = parse_config(uncommented, "example", CONF, {})
    assert config == load_config(CONF / "loopd.minimal.toml", env={})


def test_example_shows_every_key_exactly_once() -> None:
    raw = (CONF / "loopd.toml.example").read_text()
    section = ""
    seen: list[str] = []
    for line in raw.splitlines():
        if m := re.fullmatch(r"\[([a-z_.]+)\]", line):
            section = m.group(1)
        elif m := re.match(r"^(?:#|# e\.g\. )?([a-z_0-9]+) = ", line):
            seen.append(f"{section}.{m.group(1)}")
    assert sorted(seen) == sorted(leaf_keys())
