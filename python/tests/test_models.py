"""The models against the committed OpenAPI document (the wire contract's golden file):
each model has exactly its schema's fields, with a default exactly where the schema does
not require the field. A server change that adds, drops or renames a field fails here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from berth import _models

OPENAPI = Path(__file__).resolve().parents[2] / "crates" / "berth-api" / "openapi.json"
SCHEMAS = json.loads(OPENAPI.read_text())["components"]["schemas"]


@pytest.mark.parametrize("model", _models.MODELS, ids=lambda model: model.__name__)
def test_model_matches_its_schema(model: type) -> None:
    schema = SCHEMAS[model.WIRE_SCHEMA]
    fields = {field.name: field for field in dataclasses.fields(model)}
    assert set(fields) == set(schema["properties"]), model.WIRE_SCHEMA
    required = set(schema.get("required", []))
    for name, field in fields.items():
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        assert has_default == (name not in required), f"{model.WIRE_SCHEMA}.{name}"


def test_every_response_schema_has_a_model() -> None:
    document = json.loads(OPENAPI.read_text())
    answered = set()
    for operations in document["paths"].values():
        for operation in operations.values():
            for response in operation.get("responses", {}).values():
                for content in response.get("content", {}).values():
                    text = json.dumps(content.get("schema", {}))
                    answered.update(part.split('"')[0] for part in text.split("#/components/schemas/")[1:])
    modelled = {model.WIRE_SCHEMA for model in _models.MODELS}
    # Errors are exceptions (test_errors.py); the SSE message is decoded by the tail.
    assert answered - modelled <= {"ErrorBody", "SseMessage", "AnyJson", "Id"}, answered - modelled


def test_the_suite_runs_the_installed_wheels_when_the_runner_says_so() -> None:
    import os

    import berth

    if os.environ.get("BERTH_PYTHON_INSTALLED") == "1":
        from berth import _native  # type: ignore[attr-defined]

        assert "site-packages" in berth.__file__, berth.__file__
        # One distribution: the native module sits inside the installed package.
        assert _native.__file__.startswith(str(Path(berth.__file__).parent)), _native.__file__


def test_the_collector_pause_restores_what_it_found() -> None:
    """`collector_paused` (every long read's): off inside, back on only if it was on when
    that pause began, so nested pauses never leave it off and an app's own off stays."""
    import gc

    from berth._calls import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with collector_paused():
            raise RuntimeError("a failed read")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
