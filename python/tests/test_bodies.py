"""Request bodies (`berth._calls.dumps`): written by orjson where it writes what `json`
would, by `json` where it would not. Every value reads back equal to what
`json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)` encodes,
and every value `json` refuses is refused with a `berth.BerthError` that is also the
built-in exception `json` raises (`TypeError`, `ValueError`, `RecursionError`)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import random
import uuid

import pytest

import berth
from berth._calls import dumps


def reference(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


EXACT = [
    {"role": "user", "content": "héllo \u2028 \"quoted\" \\ \n\t", "type": "message"},
    {"events": [{"type": "user/message", "data": {"text": "x" * 5000, "n": 1}}] * 3, "idempotency_key": "k"},
    {"a": None, "b": [None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1]},
    {"floats": [0.1, -0.0, 1.5, 1e300, 2.5e-300, 123456789.125]},
    ["emoji 🚀", "\x00\x1f control", {"nested": {"deeper": [[], {}]}}],
    {"tuple": (1, 2, "three")},
]


@pytest.mark.parametrize("value", EXACT, ids=range(len(EXACT)))
def test_bodies_are_what_json_writes(value: object) -> None:
    assert dumps(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        2**64,  # past 64 bits: orjson refuses, `json` writes it exactly
        -(2**63) - 1,
        {"big": [10**40, -(10**40)]},
        {1: "int key", None: "none key", 2.5: "float key", True: "bool key"},
        {"float exponent": 1e-7},  # `json` spells it 1e-07, orjson 1e-7
    ],
)
def test_values_orjson_would_write_differently_read_back_exactly(value: object) -> None:
    assert json.loads(dumps(value)) == json.loads(reference(value))


def test_large_integers_are_exact_in_the_body() -> None:
    assert dumps({"n": 18446744073709551616}) == b'{"n":18446744073709551616}'


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        {"score": float("inf")},
        [1, {"deep": [None, float("-inf")]}],
        {"when": datetime.datetime(2026, 1, 1)},
        {"point": Point(1)},
        {"raw": b"bytes"},
        {"set": {1, 2}},
        "lone \ud800 surrogate",
    ],
    ids=["nan", "inf", "nested -inf beside null", "datetime", "dataclass", "bytes", "set", "surrogate"],
)
def test_what_json_refuses_is_refused_the_same_way(value: object) -> None:
    with pytest.raises(Exception) as expected:
        reference(value)
    builtin = next(kind for kind in BUILTINS if isinstance(expected.value, kind))
    with pytest.raises(builtin) as refused:
        dumps(value)
    assert isinstance(refused.value, berth.BerthError) and refused.value.argument == "value"


#: The built-in exceptions `json` raises for a value it refuses, narrowest first.
BUILTINS = (RecursionError, TypeError, ValueError)


def test_a_circular_value_is_refused() -> None:
    value: list = []
    value.append(value)
    with pytest.raises(ValueError) as refused:
        dumps(value)
    assert isinstance(refused.value, berth.InvalidArgument)


def test_a_value_nested_past_the_recursion_limit_is_refused() -> None:
    value: list = []
    for _ in range(50_000):
        value = [value]
    with pytest.raises(RecursionError) as refused:
        dumps({"data": value}, argument="events")
    assert isinstance(refused.value, berth.NestingTooDeep) and isinstance(refused.value, berth.Invalid)
    assert refused.value.argument == "events" and refused.value.body["limit"] == 128


def test_random_values_read_back_as_json_writes_them() -> None:
    rng = random.Random(11)

    def scalar() -> object:
        return rng.choice(
            [
                None,
                rng.random() < 0.5,
                rng.randint(-(2**70), 2**70),
                rng.randint(-1000, 1000),
                rng.uniform(-1e20, 1e20),
                rng.random() * 10.0 ** rng.randint(-30, 30),
                "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0x80, 0xD7FF), rng.randint(0xE000, 0x10FFFF)])) for _ in range(rng.randint(0, 12))),
            ]
        )

    def value(depth: int) -> object:
        if depth == 0 or rng.random() < 0.3:
            return scalar()
        if rng.random() < 0.5:
            return [value(depth - 1) for _ in range(rng.randint(0, 4))]
        return {f"k{rng.randint(0, 9)}{uuid.UUID(int=rng.getrandbits(128)).hex[:4]}": value(depth - 1) for _ in range(rng.randint(0, 4))}

    for _ in range(2000):
        sample = value(4)
        assert json.loads(dumps(sample)) == json.loads(reference(sample))
