"""proto.make: `maker(cls)(*values)` is `cls(*values)`, and refuses classes it cannot build."""

from dataclasses import FrozenInstanceError, dataclass, field, fields

import pytest

from boxmaker.proto import AssistantMessage, ToolMessage, UserMessage
from boxmaker.proto.log import RECORD_TYPES
from boxmaker.proto.make import maker
from boxmaker.proto.tool import ToolCall
from tests.support.proto.log_cases import LINES

CLASSES = [*RECORD_TYPES.values(), ToolCall, UserMessage, AssistantMessage, ToolMessage]


def test_every_golden_record_is_made_the_same() -> None:
    for _, _, record in LINES.values():
        cls = type(record)
        values = [getattr(record, f.name) for f in fields(cls)]
        made = maker(cls)(*values)
        assert type(made) is cls
        assert made == record
        assert repr(made) == repr(record)
        assert hash(made) == hash(record)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_made_like_the_class_call(cls: type) -> None:
    names = [f.name for f in fields(cls)]
    values = [f"v{i}" for i in range(len(names))]
    made: object = maker(cls)(*values)
    assert type(made) is cls
    assert made == cls(*values)
    assert [getattr(made, name) for name in names] == values
    with pytest.raises(FrozenInstanceError):
        setattr(made, names[0], "changed")


def test_refuses_a_class_whose_init_does_more() -> None:
    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class Derived:
        a: int
        b: int = field(init=False, default=0)

    for cls in (Checked, Derived):
        with pytest.raises(TypeError, match="does more than set its fields"):
            maker(cls)
