"""`maker(cls)`: a faster `cls(*values)` for the frozen slots dataclasses of the resume path.

Resuming a session builds a record for every line of its log and a message for most of them, so
what a constructor call costs is paid 100,000 times for a long log. Everywhere else, call the
class.
"""

from collections.abc import Callable
from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")


def maker(cls: type[T]) -> Callable[..., T]:
    """A function that makes `cls(*values)`, for a frozen slots dataclass, in about half the time.

    A frozen dataclass's __init__ sets each field through `object.__setattr__`; with the class
    call around it that is about 0.9 us for a 6-field record (0.45 us this way). The function
    made here creates the instance with `object.__new__` and sets each slot through its
    descriptor's `__set__`, the step `object.__setattr__` ends in, one direct call per field
    (a loop over the fields would cost what it saves, so there is one function per field count).

    Only for classes whose __init__ does nothing more (no __post_init__, every field an init
    field), checked here; tests/proto/test_make.py compares what it makes with `cls(*values)`.
    Beyond seven fields it returns the class itself.
    """
    declared = fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or not all(f.init for f in declared):
        raise TypeError(f"maker: {cls.__name__}'s __init__ does more than set its fields")
    new: Callable[[type[T]], T] = object.__new__
    s = [getattr(cls, f.name).__set__ for f in declared]
    match len(s):
        case 1:
            (s0,) = s

            def make1(a: object) -> T:
                r = new(cls)
                s0(r, a)
                return r

            return make1
        case 2:
            s0, s1 = s

            def make2(a: object, b: object) -> T:
                r = new(cls)
                s0(r, a)
                s1(r, b)
                return r

            return make2
        case 3:
            s0, s1, s2 = s

            def make3(a: object, b: object, c: object) -> T:
                r = new(cls)
                s0(r, a)
                s1(r, b)
                s2(r, c)
                return r

            return make3
        case 4:
            s0, s1, s2, s3 = s

            def make4(a: object, b: object, c: object, d: object) -> T:
                r = new(cls)
                s0(r, a)
                s1(r, b)
                s2(r, c)
                s3(r, d)
                return r

            return make4
        case 5:
            s0, s1, s2, s3, s4 = s

            def make5(a: object, b: object, c: object, d: object, e: object) -> T:
                r = new(cls)
                s0(r, a)
                s1(r, b)
                s2(r, c)
                s3(r, d)
                s4(r, e)
                return r

            return make5
        case 6:
            s0, s1, s2, s3, s4, s5 = s

            def make6(a: object, b: object, c: object, d: object, e: object, f: object) -> T:
                r = new(cls)
                s0(r, a)
                s1(r, b)
                s2(r, c)
                s3(r, d)
                s4(r, e)
                s5(r, f)
                return r

            return make6
        case 7:
            s0, s1, s2, s3, s4, s5, s6 = s

            def make7(
                a: object, b: object, c: object, d: object, e: object, f: object, g: object
            ) -> T:
                r = new(cls)
                s0(r, a)
                s1(r, b)
                s2(r, c)
                s3(r, d)
                s4(r, e)
                s5(r, f)
                s6(r, g)
                return r

            return make7
        case _:
            return cls
