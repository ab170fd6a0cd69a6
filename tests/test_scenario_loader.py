"""Scenario files: the shipped four load; any broken file gives one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onboard.base.errors import ScenarioError
from onboard.hri.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((ROOT / "skills" / "scenarios").glob("*.toml"))
OBJECT = (ROOT / "skills" / "scenarios" / "person-object.toml").read_text()
LINE = re.compile(r"^\S+\.toml(:\d+)?: .+$")


def test_the_seed_scenarios_load() -> None:
    names = {load_scenario(p).name for p in SCENARIOS}
    assert names == {"person-robot", "person-object", "person-environment", "person-person"}
    scenario = load_scenario(ROOT / "skills" / "scenarios" / "person-object.toml")
    assert scenario.label_at(5.0) == "not-ready"
    assert scenario.label_at(20.0) == "ok-to-engage"
    assert scenario.label_at(41.0) is None


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "at = 18.0\ntext",
            "at = 50.0\ntext",
            r":12: \[activity\[1\]\.at\] after the scenario's end",
        ),
        ('state = "ready"', 'state = "busy"', r"\[label\[2\]\.state\] Input should be"),
        ("from = 18.0", "from = 10.0", r"\[label\[1\]\.from\] labels overlap"),
        ("distance = 4.0", "distance = -1", r"\[scenario\.distance\] Input should be greater"),
        ("toward = false", "toward = 3", r"\[gaze\[0\]\.toward\] Input should be a valid boolean"),
    ],
)
def test_mistakes_name_key_and_line(tmp_path: Path, old: str, new: str, expected: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(OBJECT.replace(old, new, 1))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert re.search(expected, str(info.value)), str(info.value)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_broken_scenario_gives_one_line_errors(tmp_path: Path, data: st.DataObject) -> None:
    lines = OBJECT.splitlines()
    index = data.draw(st.integers(0, len(lines) - 1))
    replacement = data.draw(st.one_of(st.text(max_size=25), st.sampled_from(
        ["at = -1", "at = 1e400", "[[label]]", "[scenario]", "to = 0", "speed = 'fast'", "= 3"]
    )))  # fmt: skip
    lines[index] = replacement
    path = tmp_path / "s.toml"
    path.write_text("\n".join(lines))
    try:
        load_scenario(path)
    except ScenarioError as exc:
        for line in str(exc).splitlines():
            assert LINE.match(line), line
