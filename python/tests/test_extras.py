"""The extras install what their integrations need, in the versions their drop-in suites
test: `pip install './python[langgraph]'` gives a working `StateGraph` (LangGraph itself,
not only langgraph-checkpoint), each within a range that holds the pinned version."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def extra(name: str) -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "python" / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(text) for text in project["optional-dependencies"][name]]
    return {canonicalize_name(requirement.name): requirement for requirement in requirements}


def pinned(path: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / path).read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name.strip())] = version.strip()
    return pins


#: (extra, what it must hold, the pins of the suite that tests it).
EXTRAS = [
    ("langgraph", ["langgraph", "langgraph-checkpoint"], "scripts/dropins/langgraph/requirements.txt"),
]


@pytest.mark.parametrize("name, needed, pins_path", EXTRAS, ids=[name for name, _, _ in EXTRAS])
def test_an_extra_holds_what_its_suite_pins(name: str, needed: list[str], pins_path: str) -> None:
    requirements = extra(name)
    pins = pinned(pins_path)
    for package in needed:
        assert package in requirements, f"[{name}] lacks {package}"
        requirement = requirements[package]
        assert requirement.specifier.contains(pins[package]), (str(requirement), pins[package])
        # A range, not a pin: the user's other packages may need a later compatible release.
        assert not any(spec.operator == "==" for spec in requirement.specifier), str(requirement)
