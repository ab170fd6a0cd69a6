"""The skill loader: accepts the shipped skill, rejects broken ones with file, key and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onboard.base.errors import SkillError
from onboard.loop.skill import Stimulus, load_skill

ROOT = Path(__file__).resolve().parent.parent
ENGAGE = (ROOT / "skills" / "engage.toml").read_text()
LINE = re.compile(r"^\S+\.toml(:\d+)?: .+$")


def _load(tmp_path: Path, text: str, **kwargs: object) -> SkillError:
    path = tmp_path / "skill.toml"
    path.write_text(text)
    with pytest.raises(SkillError) as info:
        load_skill(path, **kwargs)  # type: ignore[arg-type]
    return info.value


def test_engage_reproduces_table_ii() -> None:
    skill = load_skill(ROOT / "skills" / "engage.toml")
    assert list(skill.actions) == [
        "approach",
        "wait",
        "wait for cue",
        "eye contact",
        "pause",
        "speak",
    ]
    assert (skill.start, skill.end) == ("approach", "speak")
    stimuli = {n: a.stimulus for n, a in skill.actions.items()}
    assert stimuli == {
        "approach": Stimulus.HIGH_LEVEL, "wait": Stimulus.ACTIVITY, "wait for cue": Stimulus.GAZE,
        "eye contact": Stimulus.LOW_LEVEL, "pause": Stimulus.LOW_LEVEL, "speak": Stimulus.END,
    }  # fmt: skip
    assert skill.goal == "Initiate a conversation at a facility."
    wait = skill.actions["wait"].describe({"X_a": "talking on a phone"})
    assert wait == 'The robot is waiting for the human to finish "talking on a phone".'


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ('start = "approach"', 'start = "aproach"', "skill.start", "unknown action 'aproach'"),
        (
            'type = "1-gaze"',
            'type = "gaze"',
            'actions."wait for cue".stimuli.type',
            "Input should be",
        ),
        (
            'text = "The robot made eye contact."',
            'text = "  "',
            'actions."eye contact".text',
            "at least 1",
        ),
        ('\\"$X_a\\"', "$X_b", "actions.wait.text", "unknown template field $X_b"),
        ('reason = "none"', 'reason = "long"', "prompt.reason", "Input should be"),
        ("reason_chars = 60", "reason_chars = 0", "prompt.reason_chars", "greater than or equal"),
        (
            "wait_times = [2, 5, 10, 20, 40]",
            "wait_times = [5, 10, 5]",
            "prompt.second_stage.wait_times",
            "a wait time is listed twice",
        ),
        (
            "wait_times = [2, 5, 10, 20, 40]",
            "wait_times = [5, -1]",
            "prompt.second_stage.wait_times[1]",
            "greater than 0",
        ),
        (
            "wait_times = [2, 5, 10, 20, 40]",
            "# no wait_times, so no $W",
            "prompt.second_stage.wait_time",
            "unknown template field $W",
        ),
        ('goal = "Initiate a conversation at $E."', 'goal = "At $Place."', "skill.goal", "$Place"),
        (
            'command = "base.stop"',
            'command = "base.fly"',
            "actions.pause.command",
            "unknown command",
        ),
        (
            "interruptible = false\ntimeout = 2.0",
            "interuptible = false",
            "actions.pause.interuptible",
            "unknown key",
        ),
        (
            '"The robot should stop its approach.",',
            '"The robot should make eye contact.",',
            "actions.pause.references[4]",
            "duplicate reference",
        ),
        (
            '  "stop", "halt", "pause",',
            '  "Stop!", "halt", "pause",',
            "actions.pause.lexicon.verbs[0]",
            "is not a phrase",
        ),
        (
            '  "stop", "halt", "pause",',
            '  "wait", "halt", "pause",',
            "actions.pause.lexicon.verbs[0]",
            "'wait' is also a lexicon phrase of 'wait'",
        ),
    ],
)
def test_each_mistake_is_one_line_with_key_and_line(
    tmp_path: Path, old: str, new: str, key: str, words: str
) -> None:
    assert old in ENGAGE
    error = _load(tmp_path, ENGAGE.replace(old, new, 1), commands={"none", "base.approach",
                  "base.stop", "head.look_at_person", "speech.say"})  # fmt: skip
    text = str(error)
    assert any(f"[{key}]" in line and words in line for line in text.splitlines()), text
    problem = next(p for p in error.problems if p.key == key)
    assert problem.line is not None
    if new.startswith("#"):  # a key removed: the problem is on the line that needed it
        assert "$W" in ENGAGE.splitlines()[problem.line - 1]
        return
    assert new.splitlines()[0].split("=")[0].strip() in ENGAGE.replace(old, new, 1).splitlines()[
        problem.line - 1
    ] or key.startswith(("actions.pause.references", "actions.pause.lexicon"))  # the list's line


def test_unreachable_end_is_rejected(tmp_path: Path) -> None:
    text = ENGAGE.replace("[actions.approach]\n", '[actions.approach]\nnext = ["pause"]\n', 1)
    text = text.replace("[actions.pause]\n", '[actions.pause]\nnext = ["approach"]\n', 1)
    error = _load(tmp_path, text)
    assert "[skill.end] no path of `next` leads from start to 'speak'" in str(error)


def test_stimulus_needing_missing_perception_is_rejected(tmp_path: Path) -> None:
    error = _load(tmp_path, ENGAGE, perception=("activity",))
    assert "needs gaze perception, which the robot lacks" in str(error)


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    error = _load(tmp_path, ENGAGE.replace('end = "speak"', 'end = "speak'))
    assert re.search(r"skill\.toml:9: TOML syntax error", str(error)), str(error)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match="file not found"):
        load_skill(tmp_path / "nope.toml")


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_broken_skill_gives_one_line_errors(tmp_path: Path, data: st.DataObject) -> None:
    """Cut, duplicate or garble lines of the real skill: a SkillError, never a traceback."""
    lines = ENGAGE.splitlines()
    index = data.draw(st.integers(0, len(lines) - 1))
    mutation = data.draw(st.sampled_from(["drop", "dup", "garble", "truncate", "value"]))
    if mutation == "drop":
        del lines[index]
    elif mutation == "dup":
        lines.insert(index, lines[index])
    elif mutation == "garble":
        lines[index] = data.draw(st.text(max_size=30))
    elif mutation == "truncate":
        lines = lines[:index]
    else:
        key = lines[index].split("=")[0]
        value = data.draw(st.sampled_from(["1", "-3.5", "true", "[]", "{}", '""']))
        lines[index] = f"{key}= {value}"
    path = tmp_path / "skill.toml"
    path.write_text("\n".join(lines))
    try:
        load_skill(path)
    except SkillError as exc:
        for line in str(exc).splitlines():
            assert LINE.match(line), line
