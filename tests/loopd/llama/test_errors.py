"""boxmaker.loopd.llama.errors: the InferError family as one line and as JSON."""

from boxmaker.loopd.llama.errors import HttpStatus, InferError, Stalled


def test_describe_is_the_tag_then_what_happened() -> None:
    assert Stalled("no byte for 200 ms").describe() == "stalled: no byte for 200 ms"
    assert HttpStatus(400, "too long").describe() == "http: HTTP 400: too long"


def test_every_kind_has_its_own_tag() -> None:
    kinds = InferError.__subclasses__()
    assert len(kinds) == 9
    assert len({k.TAG for k in kinds}) == len(kinds)
    assert InferError.TAG not in {k.TAG for k in kinds}
