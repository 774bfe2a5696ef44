"""Strict JSON shapes for the proto types, from one table: the dataclass fields themselves.

Each wire or log field is declared once, on its dataclass, as
`name: T = field(metadata=wire(CODEC))`, with `key="class"` when the JSON key is not a Python
name. `to_obj` and `from_obj` walk `dataclasses.fields` in order, so the JSON key order is the
field order and nothing can drift between a type and its encoder.

Rules, the same on every path:
- Decoding is strict: every key present, no other key, each value of exactly its JSON type. A
  boolean is not an integer, a float is not an integer, null is allowed only where a codec says
  "or null". Failures raise BodyError naming the field path and the expected type
  (`assistant.tool_calls[1].name: expected string, got null`).
- Encoding checks the same rules on the Python values and raises EncodeError (the caller's bug,
  never the peer's), so nothing is written that would not read back.
- Integers are 0 to 2^63-1: every count and id here is non-negative, and the range fits a signed
  64-bit integer in any peer (orjson reads larger ones as floats).

`load_json` and `load_json_object` read JSON text for every reader in Boxmaker (frames, log lines,
stream chunks, llama-server's answers, files), so "not UTF-8 / not JSON / not an object" is said
one way everywhere, through the caller's own error class.
"""

import dataclasses
import enum
import re
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from .errors import BodyError, EncodeError
from .ids import CLIENT_REF_RULE, SESSION_ID_RULE, is_client_ref, is_session_id
from .rfc3339 import TIME_EXAMPLE, is_time

JsonObj = dict[str, Any]
T = TypeVar("T")

MAX_INT = 2**63 - 1

# How much of a bad value an error message quotes.
_QUOTE_CHARS = 40


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def load_json(data: bytes | str, what: str, error: Callable[[str], Exception]) -> Any:
    """`data` parsed as JSON (RFC 8259, strictly: orjson's reader).

    Args:
        data: the text, as UTF-8 bytes or a str.
        what: the subject of the message, singular: "frame", "a stream chunk".
        error: makes the exception to raise from the message: a class such as FrameError, or a
            function that adds what the reader should see (`lambda m: E(f"{m}: {data!r:.80}")`).

    Raises:
        what `error` makes: "<what> is not UTF-8 (...)" or "<what> is not JSON (...)".
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if isinstance(data, bytes):  # only on failure: the good path never decodes twice
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise error(f"{what} is not UTF-8 ({e.reason} at byte {e.start})") from None
        raise error(f"{what} is not JSON ({exc})") from None


def load_json_object(data: bytes | str, what: str, error: Callable[[str], Exception]) -> JsonObj:
    """`data` parsed as one JSON object. As `load_json`, and also:

    Raises:
        what `error` makes: "<what> is not a JSON object (got <type>)".
    """
    obj = load_json(data, what, error)
    if not isinstance(obj, dict):
        raise error(f"{what} is not a JSON object (got {json_type(obj)})")
    return obj


def quote(s: str) -> str:
    """`s` as a short JSON-ish quoted string for a message."""
    shown = s if len(s) <= _QUOTE_CHARS else s[:_QUOTE_CHARS] + "..."
    return '"' + shown.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'


def wrong(path: str, expected: str, value: object) -> BodyError:
    return BodyError(f"{path}: expected {expected}, got {json_type(value)}")


def _bad(path: str, expected: str, value: object) -> EncodeError:
    return EncodeError(f"{path}: expected {expected}, got {type(value).__name__}")


@dataclasses.dataclass(frozen=True, slots=True)
class Codec:
    """How one field crosses JSON: `decode(json_value, path)` and `encode(value, path)`.

    `absent_is_none`: the field's None is written by leaving its key out (never as null), and a
    key left out reads back as None (the field's default); a null that is sent is refused."""

    expected: str
    decode: Callable[[object, str], Any]
    encode: Callable[[Any, str], Any]
    absent_is_none: bool = False


def wire(codec: Codec, key: str | None = None) -> dict[str, Any]:
    """A dataclass field's metadata: its codec and, if it differs from the field name, its JSON
    key. Use as `name: T = field(metadata=wire(CODEC))`."""
    return {"codec": codec, "key": key}


# --- scalar codecs -------------------------------------------------------------------------------


def _dec_str(v: object, path: str) -> str:
    if not isinstance(v, str):
        raise wrong(path, "string", v)
    return v


def _enc_str(v: object, path: str) -> str:
    if not isinstance(v, str):
        raise _bad(path, "str", v)
    if v.isascii():
        return v
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        # orjson refuses these too, but without naming the field.
        raise EncodeError(
            f"{path}: lone surrogate at index {e.start}; UTF-8 cannot carry it"
        ) from None
    return v


STR = Codec("string", _dec_str, _enc_str)


def _dec_opt_str(v: object, path: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise wrong(path, "string or null", v)
    return v


def _enc_opt_str(v: object, path: str) -> str | None:
    return None if v is None else _enc_str(v, path)


OPT_STR = Codec("string or null", _dec_opt_str, _enc_opt_str)


def _dec_uint(v: object, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise wrong(path, "integer", v)
    if not 0 <= v <= MAX_INT:
        raise BodyError(f"{path}: expected integer from 0 to 2^63-1, got {v}")
    return v


def _enc_uint(v: object, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(path, "int", v)
    if not 0 <= v <= MAX_INT:
        raise EncodeError(f"{path}: expected integer from 0 to 2^63-1, got {v}")
    return v


UINT = Codec("integer", _dec_uint, _enc_uint)


def _dec_bool(v: object, path: str) -> bool:
    if not isinstance(v, bool):
        raise wrong(path, "boolean", v)
    return v


def _enc_bool(v: object, path: str) -> bool:
    if not isinstance(v, bool):
        raise _bad(path, "bool", v)
    return v


BOOL = Codec("boolean", _dec_bool, _enc_bool)


def _or_absent(enc: Callable[[object, str], Any], name: str) -> Callable[[object, str], Any]:
    def encode(v: object, path: str) -> Any:
        if v is None:  # to_obj leaves the key out before it gets here
            raise _bad(path, name, v)
        return enc(v, path)

    return encode


# A value that may be left out: None in Python, no key in JSON (give the field `= None`).
BOOL_OR_ABSENT = Codec("boolean", _dec_bool, _or_absent(_enc_bool, "bool"), absent_is_none=True)
STR_OR_ABSENT = Codec("string", _dec_str, _or_absent(_enc_str, "str"), absent_is_none=True)
UINT_OR_ABSENT = Codec("integer", _dec_uint, _or_absent(_enc_uint, "int"), absent_is_none=True)


def _pattern(name: str, check: Callable[[str], bool], expected: str) -> Codec:
    """A string codec that also checks the string's shape."""

    def dec(v: object, path: str) -> str:
        s = _dec_str(v, path)
        if not check(s):
            raise BodyError(f"{path}: expected {expected}, got {quote(s)}")
        return s

    def enc(v: object, path: str) -> str:
        s = _enc_str(v, path)
        if not check(s):
            raise EncodeError(f"{path}: expected {expected}, got {quote(s)}")
        return s

    return Codec(name, dec, enc)


TIME = _pattern("time", is_time, f"an RFC 3339 UTC time like {TIME_EXAMPLE}")

_HEX64_RE = re.compile(r"[0-9a-f]{64}")
HEX64 = _pattern(
    "hex digest", lambda s: _HEX64_RE.fullmatch(s) is not None, "64 lowercase hex digits"
)

SESSION_ID = _pattern("session id", is_session_id, f"a session id ({SESSION_ID_RULE})")

# M4 section 6: a client's name for a turn (gatewayd's "mm:<post id>"); None leaves the key out.
_REF = _pattern("client ref", is_client_ref, f"a client ref ({CLIENT_REF_RULE})")
CLIENT_REF_OR_ABSENT = Codec("client ref", _REF.decode, _REF.encode, absent_is_none=True)


def enum_codec(cls: type[enum.StrEnum]) -> Codec:
    """A string codec whose values are the members of a StrEnum."""
    values = ", ".join(quote(m.value) for m in cls)
    expected = f"one of {values}"

    def dec(v: object, path: str) -> enum.StrEnum:
        s = _dec_str(v, path)
        try:
            return cls(s)
        except ValueError:
            raise BodyError(f"{path}: expected {expected}, got {quote(s)}") from None

    def enc(v: object, path: str) -> str:
        if not isinstance(v, cls):
            raise _bad(path, cls.__name__, v)
        return v.value

    return Codec(expected, dec, enc)


def _dec_object(v: object, path: str) -> JsonObj:
    if not isinstance(v, dict):
        raise wrong(path, "object", v)
    return v


def _enc_object(v: object, path: str) -> JsonObj:
    if not isinstance(v, dict):
        raise _bad(path, "dict", v)
    return v


# A free JSON object (a tool's parameter schema): its inside is not checked here.
OBJECT = Codec("object", _dec_object, _enc_object)


def struct(cls: type[Any]) -> Codec:
    """A nested object decoded into `cls` by its own wire fields."""
    return Codec("object", lambda v, p: from_obj(cls, v, p), lambda v, p: to_obj(v, p, cls))


def tuple_of(cls: type[Any]) -> Codec:
    """An array of `cls` objects, held as a tuple."""

    def dec(v: object, path: str) -> tuple[Any, ...]:
        if not isinstance(v, list):
            raise wrong(path, "array", v)
        return tuple(from_obj(cls, item, f"{path}[{i}]") for i, item in enumerate(v))

    def enc(v: object, path: str) -> list[JsonObj]:
        if not isinstance(v, tuple):
            raise _bad(path, "tuple", v)
        return [to_obj(item, f"{path}[{i}]", cls) for i, item in enumerate(v)]

    return Codec("array", dec, enc)


# --- whole objects -------------------------------------------------------------------------------

_Spec = tuple[tuple[str, str, Codec], ...]
_SPECS: dict[type[Any], _Spec] = {}
_OPTIONAL: dict[type[Any], frozenset[str]] = {}


def spec(cls: type[Any]) -> _Spec:
    """(attribute, JSON key, codec) for each wire field of `cls`, in order."""
    found = _SPECS.get(cls)
    if found is None:
        found = tuple(
            (f.name, f.metadata.get("key") or f.name, f.metadata["codec"])
            for f in dataclasses.fields(cls)
        )
        _SPECS[cls] = found
    return found


def keys(cls: type[Any]) -> tuple[str, ...]:
    return tuple(key for _, key, _ in spec(cls))


def to_obj(
    inst: Any, path: str, cls: type[Any] | None = None, into: JsonObj | None = None
) -> JsonObj:
    """`inst`'s wire fields as a JSON object, in field order, appended to `into` if given.

    Raises:
        EncodeError: `inst` is not a `cls`, or a field breaks its codec.
    """
    if cls is not None and not isinstance(inst, cls):
        raise _bad(path, cls.__name__, inst)
    out: JsonObj = {} if into is None else into
    for attr, key, codec in spec(type(inst)):
        value = getattr(inst, attr)
        if value is None and codec.absent_is_none:
            continue
        out[key] = codec.encode(value, f"{path}.{key}")
    return out


def optional_keys(cls: type[Any]) -> frozenset[str]:
    """The JSON keys of the fields of `cls` that have a default: a peer may leave them out."""
    found = _OPTIONAL.get(cls)
    if found is None:
        with_default = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        }
        found = frozenset(key for attr, key, _ in spec(cls) if attr in with_default)
        _OPTIONAL[cls] = found
    return found


def check_keys(
    obj: JsonObj, expected: tuple[str, ...], path: str, optional: frozenset[str] = frozenset()
) -> None:
    """Raises BodyError unless `obj` has the keys `expected` (any order), and no others; those in
    `optional` may be left out."""
    present = 0
    for key in expected:
        if key in obj:
            present += 1
        elif key not in optional:
            raise BodyError(f"{path}: missing key {quote(key)}")
    if len(obj) != present:
        extra = next(k for k in obj if k not in expected)
        listed = ", ".join(expected)
        raise BodyError(f"{path}: unexpected key {quote(extra)} (the keys are {listed})")


def from_obj(cls: type[T], obj: object, path: str, extra_keys: tuple[str, ...] = ()) -> T:
    """Decodes a JSON object into `cls`, strictly.

    Args:
        extra_keys: keys the caller has already read (a tag, a sequence number) and allows.

    Raises:
        BodyError: naming the field path and the expected type.
    """
    if not isinstance(obj, dict):
        raise wrong(path, "object", obj)
    check_keys(obj, (*extra_keys, *keys(cls)), path, optional_keys(cls))
    values = {
        attr: codec.decode(obj[key], f"{path}.{key}")
        for attr, key, codec in spec(cls)
        if key in obj  # a field left out keeps its default (optional_keys)
    }
    return cls(**values)
