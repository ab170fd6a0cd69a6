"""runtime/grounding/candidates.py: the bottom-up candidate store and registering a new action."""

from __future__ import annotations

import json
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from onboard.base.errors import CandidateError, SkillError
from onboard.grounding.candidates import CandidateStore, add_action
from onboard.loop.skill import load_skill

ROOT = Path(__file__).resolve().parent.parent
ENGAGE = ROOT / "skills" / "engage.toml"
REPLY = "The robot should wave at the person from a distance."


# ---------------------------------------------------------------------------- CandidateStore


def test_add_list_get(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path / "deep" / "candidates.jsonl")  # parent made on demand
    assert store.list() == []
    first = store.add("engage", REPLY, "The person is reading.")
    second = store.add("engage", "The robot should water the plants.", "The person is idle.")
    other = store.add("patrol", REPLY, "Nobody is there.")
    assert len({first.id, second.id, other.id}) == 3  # the id depends on skill and reply
    assert len(first.id) == 8
    assert first.skill == "engage" and first.reply == REPLY
    assert first.situation == "The person is reading."
    assert first.registered_as is None
    assert store.list() == [first, second, other]  # oldest first
    assert store.list("engage") == [first, second]
    assert store.list("patrol") == [other]
    assert store.get(second.id) == second
    assert store.get(second.id[:4]) == second  # a unique prefix is enough


def test_same_reply_is_one_candidate_with_the_latest_situation(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path / "c.jsonl")
    old = store.add("engage", REPLY, "The person is reading.")
    new = store.add("engage", REPLY, "The person is eating.")
    assert old.id == new.id
    [only] = store.list()
    assert only.situation == "The person is eating."


def test_get_unknown_or_ambiguous_raises(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path / "c.jsonl")
    store.add("engage", REPLY, "x")
    store.add("engage", "The robot should water the plants.", "y")
    with pytest.raises(CandidateError, match="no candidate with id 'zzzz'"):
        store.get("zzzz")
    with pytest.raises(CandidateError, match="2 candidates"):
        store.get("")


def test_mark_registered(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path / "c.jsonl")
    first = store.add("engage", REPLY, "x")
    second = store.add("engage", "The robot should water the plants.", "y")
    store.mark_registered(first, "wave")
    assert store.get(first.id).registered_as == "wave"
    assert store.get(second.id).registered_as is None
    # a fresh store reads the same file the same way
    assert CandidateStore(store.path).get(first.id).registered_as == "wave"


def test_each_record_is_one_json_line(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path / "c.jsonl")
    candidate = store.add("engage", 'Say "hi" – gently.', "x")
    store.mark_registered(candidate, "greet")
    lines = store.path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["candidate", "registered"]
    assert json.loads(lines[0])["reply"] == 'Say "hi" – gently.'


def test_torn_last_line_is_skipped_and_the_rest_survive(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path / "c.jsonl")
    first = store.add("engage", REPLY, "x")
    second = store.add("engage", "The robot should water the plants.", "y")
    store.mark_registered(first, "wave")
    whole = store.path.read_bytes()
    with store.path.open("ab") as out:  # a crash in the middle of an append
        out.write(b'{"event": "candidate", "id": "deadbeef", "skill": "eng')
    assert store.list() == [replace(first, registered_as="wave"), second]
    assert store.path.read_bytes().startswith(whole)  # reading never rewrites the file


def test_record_appended_after_a_torn_line_survives(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path / "c.jsonl")
    first = store.add("engage", REPLY, "x")
    with store.path.open("ab") as out:
        out.write(b'{"event": "candidate", "id": "dead')
    after = store.add("engage", "The robot should water the plants.", "y")
    assert store.list() == [first, after]


# ---------------------------------------------------------------------------- add_action


@pytest.fixture
def skill_copy(tmp_path: Path) -> Path:
    path = tmp_path / "skills" / "engage.toml"
    path.parent.mkdir()
    shutil.copyfile(ENGAGE, path)
    return path


def _comment_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("#")]


def _trailing_comments(text: str) -> list[str]:
    return [line.split("#", 1)[1] for line in text.splitlines() if "  #" in line]


def test_add_action_writes_a_loadable_action(skill_copy: Path) -> None:
    original = skill_copy.read_text(encoding="utf-8")
    add_action(
        skill_copy,
        "wave",
        REPLY,
        text="The robot waved at the person.",
        stimuli="2-A",
        command="none",
        interruptible=False,
        validate=load_skill,
    )
    updated = skill_copy.read_text(encoding="utf-8")
    assert _comment_lines(original)  # the fixture file does have comments to keep
    for line in _comment_lines(original):
        assert line in updated.splitlines()
    for comment in _trailing_comments(original):
        assert comment in updated
    assert updated.startswith(original.rstrip("\n"))  # nothing before the new table changed
    skill = load_skill(skill_copy)
    wave = skill.actions["wave"]
    assert wave.spec.references == [REPLY]
    assert wave.spec.text == "The robot waved at the person."
    assert wave.stimulus == "2-A"
    assert wave.spec.interruptible is False
    assert list(skill.actions)[:-1] == list(load_skill(ENGAGE).actions)
    assert list(skill_copy.parent.iterdir()) == [skill_copy]  # no temporary file left


def test_add_action_with_a_spaced_name_and_high_level_stimulus(skill_copy: Path) -> None:
    add_action(skill_copy, "step aside", REPLY, text="The robot stepped aside.", stimuli="2-B")
    action = load_skill(skill_copy).actions["step aside"]
    assert action.spec.stimuli.horizon == 5.0  # 2-B needs a horizon; a default is written
    assert action.spec.references == [REPLY]


def test_add_existing_action_raises_and_keeps_the_file(skill_copy: Path) -> None:
    before = skill_copy.read_bytes()
    with pytest.raises(CandidateError, match="'wait for cue' exists already"):
        add_action(skill_copy, "wait for cue", REPLY, text="x", stimuli="1-gaze")
    assert skill_copy.read_bytes() == before


@pytest.mark.parametrize(
    ("reference", "stimuli"),
    [
        pytest.param(REPLY, "sometimes", id="bad-stimulus"),
        pytest.param("The robot should greet the person.", "2-A", id="duplicate-reference"),
    ],
)
def test_validation_failure_leaves_the_file_byte_identical(
    skill_copy: Path, reference: str, stimuli: str
) -> None:
    before = skill_copy.read_bytes()
    seen: list[Path] = []

    def validate(path: Path) -> object:
        seen.append(path)
        return load_skill(path)

    with pytest.raises(CandidateError, match="would break the skill") as info:
        add_action(skill_copy, "wave", reference, text="x", stimuli=stimuli, validate=validate)
    assert isinstance(info.value.__cause__, SkillError)
    assert skill_copy.read_bytes() == before
    assert seen and seen[0] != skill_copy  # the candidate file was checked, not the skill
    assert list(skill_copy.parent.iterdir()) == [skill_copy]


def test_any_skill_error_from_validate_refuses_the_write(skill_copy: Path) -> None:
    before = skill_copy.read_bytes()

    def refuse(path: Path) -> object:
        return load_skill(path, perception=("activity",))  # this robot cannot see gaze

    with pytest.raises(CandidateError, match="needs gaze perception"):
        add_action(skill_copy, "wave", REPLY, text="x", stimuli="2-A", validate=refuse)
    assert skill_copy.read_bytes() == before


def test_foreign_error_from_validate_propagates_and_cleans_up(skill_copy: Path) -> None:
    before = skill_copy.read_bytes()

    def crash(path: Path) -> object:
        raise RuntimeError("validator crashed")

    with pytest.raises(RuntimeError, match="validator crashed"):
        add_action(skill_copy, "wave", REPLY, text="x", stimuli="2-A", validate=crash)
    assert skill_copy.read_bytes() == before
    assert list(skill_copy.parent.iterdir()) == [skill_copy]


def test_add_action_to_an_unreadable_skill(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[skill\nname = 1\n", encoding="utf-8")
    with pytest.raises(CandidateError, match="cannot read the skill"):
        add_action(bad, "wave", REPLY, text="x", stimuli="2-A")
    with pytest.raises(CandidateError, match="cannot read the skill"):
        add_action(tmp_path / "missing.toml", "wave", REPLY, text="x", stimuli="2-A")
    no_actions = tmp_path / "empty.toml"
    no_actions.write_text('[skill]\nname = "x"\n', encoding="utf-8")
    with pytest.raises(CandidateError, match=r"no \[actions\] table"):
        add_action(no_actions, "wave", REPLY, text="x", stimuli="2-A")


def test_add_action_keeps_the_file_mode(skill_copy: Path) -> None:
    skill_copy.chmod(0o644)
    add_action(skill_copy, "wave", REPLY, text="x", stimuli="2-A", validate=load_skill)
    assert stat.S_IMODE(skill_copy.stat().st_mode) == 0o644
