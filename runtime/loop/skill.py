"""The skill DSL: a TOML file declares the goal, prompts and action set of one skill.

Everything is resolved here, when the skill loads: action names, the start, end and fallback
actions, reachability of the end action, template fields, the perception each stimulus needs
and the driver command each action runs. A skill that loads is a skill that can run.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from string import Template
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from onboard.base.errors import Problem, SkillError
from onboard.base.tomlfile import (
    KeyLines,
    ProblemAt,
    format_key,
    parse_toml,
    read_toml,
    validation_problems,
)

__all__ = [
    "ActionSpec",
    "LexiconSpec",
    "ReasonMode",
    "Skill",
    "SkillCriticSpec",
    "Stimulus",
    "StimulusSpec",
    "action_name_problem",
    "load_skill",
    "load_skill_text",
]

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

#: Fields an action text may use: what was observed when the action began.
OBSERVED_FIELDS = {"X_a": "activity", "X_g": "gaze"}
#: references per skill: each is embedded when the skill loads (milliseconds each) and
#: ``onboard check`` compares every pair; the shipped skills have under 100
MAX_REFERENCES = 1000

#: What a skill observes and how its replies read (runtime/loop/kind.py): a person as text,
#: replies onto action names; a scene seen by the camera, replies onto actions with
#: arguments bound to the objects in view; or a scene the reply answers with a plan and a
#: program (generated code, ReplanVLM: runtime/replan/kind.py); or a team task the reply
#: answers with one action per agent (ReAd: runtime/collab/kind.py).
SkillKindName = Literal["person", "scene", "code", "team"]
#: The arguments a scene action may take: the object it acts on, where it goes.
Param = Literal["object", "target"]


class Stimulus(StrEnum):
    """When the event manager asks the LLM again (the seed's section III-C)."""

    ACTIVITY = "1-activity"  # type 1: on a change of activity, bounded by wait_time
    GAZE = "1-gaze"  # type 1: on a change of gaze, bounded by wait_time
    LOW_LEVEL = "2-A"  # when the action completes
    HIGH_LEVEL = "2-B"  # on completion, on a situation change, or "lose the person" = yes
    END = "end"  # the skill's end action

    @property
    def perception(self) -> str | None:
        return {"1-activity": "activity", "1-gaze": "gaze"}.get(self.value)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StimulusSpec(_Strict):
    type: Stimulus
    horizon: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="T of the lose-the-person question (2-B), seconds"
    )


class LexiconSpec(_Strict):
    """Phrases that name the action, for the mapper's rule stage (runtime/grounding/mapping.py)."""

    verbs: list[Text] = Field(default=[], description="what the robot does: 'walk up', 'stop'")
    until: list[Text] = Field(default=[], description="what it waits for: 'finish', 'look'")
    negated: list[Text] = Field(
        default=[], description="what it is told not to do, meaning this action: 'move'"
    )
    holds: list[Text] = Field(
        default=[], description="this action alone, beside a waiting step its manner: 'stay put'"
    )


class ActionSpec(_Strict):
    text: Text
    stimuli: StimulusSpec
    command: Text = "none"
    args: dict[str, str | float | int | bool] = {}
    interruptible: bool = True
    timeout: Annotated[float, Field(gt=0)] | None = None
    verify: bool = Field(
        default=True,
        description="false: the action changes nothing the verifiers could see (a look): no "
        "fresh look after it, no verification",
    )
    references: list[Text] = Field(
        default=[], description="what a reply naming this action says (person and scene skills)"
    )
    lexicon: LexiconSpec = LexiconSpec()
    next: list[Text] | None = None
    params: list[Param] = Field(
        default=[],
        description="scene skills: the arguments a step binds ($object, $target in the text)",
    )


#: what a constrained reply may write as its "reason" (onboard.llm.prompts): any string, at
#: most ``reason_chars`` characters, or no reason key at all
ReasonMode = Literal["free", "short", "none"]


class SecondStage(_Strict):
    wait_time: Text
    lose_person: Text
    wait_times: list[Annotated[float, Field(gt=0)]] | None = Field(
        default=None,
        min_length=2,
        description="the wait_time answers a constrained reply may give, seconds ($W in the "
        "wait_time prompt); unset: any number",
    )


class PromptSpec(_Strict):
    intro: Text
    ack: Text | None = Field(
        default=None, description="the model's answer to the intro (person and scene skills)"
    )
    situation: Text = "$U $X"
    reason: ReasonMode = Field(
        default="free", description="the constrained replies' reason: free, short or none"
    )
    reason_chars: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=80, description='the longest reason when reason = "short"'
    )
    second_stage: SecondStage | None = Field(
        default=None, description="the event manager's questions (person skills need them)"
    )
    images: bool = Field(
        default=False, description="scene skills: send the camera frame with each plan request"
    )


class SkillHeader(_Strict):
    name: Text
    kind: SkillKindName = "person"
    description: str = ""
    goal: Text
    start: Text
    end: Text
    fallback: Text
    default_phrase: Text
    params: dict[str, str] = {}
    max_fallbacks: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="stop the episode after this many fallbacks, counted per goal (a planned "
        "action between does not reset it; the fallback has made the robot safe; 0: the first "
        "fallback ends the episode); unset: never",
    )
    max_rounds: Annotated[int, Field(ge=0, le=10)] = Field(
        default=1, description="re-asks per decision after its first proposal (engine.py)"
    )
    max_replans: Annotated[int, Field(ge=0, le=10)] | None = Field(
        default=None,
        description="replans per decision after a failed verification, counted apart from "
        "max_rounds, which then bounds the re-asks between two runs (engine.py); unset: a "
        "replan is one more round",
    )


class MappingSpec(_Strict):
    reject: list[Text] = Field(default=[], description="anchors for out-of-set replies")


Finite = Annotated[float, Field(allow_inf_nan=False)]


class RegionSpec(_Strict):
    """A rectangle on the table, in the robot base frame (metres): where a step may put or
    push an object ("the left side")."""

    center: tuple[Finite, Finite]
    size: tuple[Annotated[float, Field(gt=0)], Annotated[float, Field(gt=0)]]

    def contains(self, x: float, y: float) -> bool:
        dx, dy = abs(x - self.center[0]), abs(y - self.center[1])
        return dx <= self.size[0] / 2 and dy <= self.size[1] / 2


class SceneSpec(_Strict):
    """What a scene skill knows of its workspace, in the robot base frame."""

    regions: dict[Text, RegionSpec] = Field(default={}, description="named table regions")
    safe: Text | None = Field(
        default=None, description="the region where the fallback puts a held object down"
    )
    handover: tuple[Finite, Finite, Finite] | None = Field(
        default=None, description="the tool position a give step holds an object out at (m)"
    )
    table: Finite = Field(default=0.0, description="the table top's height (m, base frame)")


class SkillCriticSpec(_Strict):
    """``[critic]``: a learned critic checks each proposal (ReAd; onboard.hri.critic)."""

    model: Text = Field(
        description="the ONNX critic, its card beside it; a relative path starts from the "
        "folder that holds the shipped models/ (the checkout, or the installed package)"
    )
    wait: Text = Field(description="the skill's action the critic's WAIT stands for")
    epsilon: Finite = Field(
        default=0.0, description="a first action whose advantage is under this is refused"
    )
    rule: Literal["joint", "readiness"] = Field(
        default="joint",
        description="joint: ReAd-J's advantage against WAIT; readiness: the end action by its "
        "own value, every other action refused where the end action scores `ready` or more",
    )
    ready: Finite | None = Field(
        default=None,
        description="readiness: the end action's score at which holding back "
        "is refused (none: never)",
    )
    looking_away: Finite | Literal["never"] | None = Field(
        default=None,
        description="readiness: to speak to a person not looking toward the robot, the end "
        "action must score this or more, and the person must not have scored under epsilon "
        "since they last looked at it; never: only a person looking at the robot is spoken to "
        "(none: no gaze bar)",
    )
    look_held: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        default=None,
        description="readiness, with looking_away: seconds a person who scored under epsilon "
        "must look at the robot before it speaks to them (none: any look)",
    )
    answer_within: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        default=None,
        description="readiness, with attend: seconds after the attend action began by which a "
        "person free to talk has looked back; one still looking away then is read as busy "
        "(none: an unanswered look means nothing)",
    )
    attend: Text | None = Field(
        default=None,
        description="readiness, with looking_away: the skill's action that draws a person's "
        "look (eye contact); where the person looks ready but is not looking at the robot, "
        "holding back is refused unless it starts with this action, and a plan that takes it "
        "before speaking has its speech checked after the look",
    )
    members: list[Text] = Field(
        default=[],
        description="readiness: more critics of the same card, each trained on part of the "
        "data; the end action's score is the lowest of all (the critic vouches only for "
        "what they agree on)",
    )


class SkillFile(_Strict):
    skill: SkillHeader
    prompt: PromptSpec
    mapping: MappingSpec = MappingSpec()
    critic: SkillCriticSpec | None = None
    scene: SceneSpec | None = None
    actions: dict[str, ActionSpec] = Field(min_length=2)


@dataclass(frozen=True)
class Action:
    """One action of a loaded skill, with its templates compiled."""

    name: str
    spec: ActionSpec
    text: Template

    @property
    def stimulus(self) -> Stimulus:
        return self.spec.stimuli.type

    def describe(self, observed: Mapping[str, str]) -> str:
        """The action text, filled with what was observed when the action began."""
        return self.text.safe_substitute(observed)


@dataclass(frozen=True)
class Skill:
    """A loaded, fully resolved skill."""

    name: str
    path: Path
    goal: str
    start: str
    end: str
    fallback: str
    default_phrase: str
    prompt: PromptSpec
    actions: dict[str, Action]
    reject: list[str]
    lines: KeyLines = field(repr=False, compare=False)
    max_rounds: int = 1
    max_replans: int | None = None
    max_fallbacks: int | None = None
    kind: str = "person"
    scene: SceneSpec | None = None
    critic: SkillCriticSpec | None = None
    #: a scene skill's request from the user, as its goal was filled with it (goal_skill)
    request: str = ""
    #: the TOML text the skill was loaded from (a recording's header carries it)
    source: str = field(default="", repr=False, compare=False)

    @property
    def questions(self) -> SecondStage:
        """The second-stage questions (person skills always have them: the loader checks)."""
        if self.prompt.second_stage is None:
            raise RuntimeError(f"skill {self.name!r} ({self.kind}) asks no second-stage questions")
        return self.prompt.second_stage

    def allowed_after(self, name: str) -> list[str]:
        nxt = self.actions[name].spec.next
        return list(self.actions) if nxt is None else list(nxt)

    def line_of(self, *path: str | int) -> int | None:
        return self.lines.line_of(path)


def load_skill(
    path: Path,
    perception: Collection[str] = ("activity", "gaze"),
    commands: Collection[str] | Mapping[str, Collection[str]] | None = None,
) -> Skill:
    """Load and check a skill file; raises SkillError listing every problem found.

    ``commands``: the driver commands actions may name, or per skill kind (``{"person":
    ..., "scene": ...}``); None checks no command."""
    data, source = read_toml(path, SkillError)
    return _resolve(data, source, path, perception, commands)


def load_skill_text(
    text: str,
    name: str,
    perception: Collection[str] = ("activity", "gaze"),
    commands: Collection[str] | Mapping[str, Collection[str]] | None = None,
) -> Skill:
    """Load and check a skill from its TOML text (a recording's header holds it), with the
    same checks as :func:`load_skill`; ``name`` stands for the file in every problem (and
    is the skill's ``path``)."""
    data = parse_toml(text, name, SkillError)
    return _resolve(data, text, Path(name), perception, commands)


def _resolve(
    data: dict[str, Any],
    source: str,
    path: Path,
    perception: Collection[str],
    commands: Collection[str] | Mapping[str, Collection[str]] | None,
) -> Skill:
    lines = KeyLines(source)
    try:
        spec = SkillFile.model_validate(data)
    except ValidationError as exc:
        raise SkillError(validation_problems(path, lines, exc)) from exc
    problems = list(_check(spec, path, lines, set(perception), commands))
    if problems:
        raise SkillError(problems)
    goal = Template(spec.skill.goal).safe_substitute(spec.skill.params)
    actions = {name: Action(name, a, Template(a.text)) for name, a in spec.actions.items()}
    return Skill(
        name=spec.skill.name,
        path=path,
        goal=goal,
        start=spec.skill.start,
        end=spec.skill.end,
        fallback=spec.skill.fallback,
        default_phrase=spec.skill.default_phrase,
        prompt=spec.prompt,
        actions=actions,
        reject=list(spec.mapping.reject),
        lines=lines,
        max_rounds=spec.skill.max_rounds,
        max_replans=spec.skill.max_replans,
        max_fallbacks=spec.skill.max_fallbacks,
        kind=spec.skill.kind,
        scene=spec.scene,
        critic=spec.critic,
        source=source,
    )


def _check(
    spec: SkillFile,
    path: Path,
    lines: KeyLines,
    perception: set[str],
    commands: Collection[str] | Mapping[str, Collection[str]] | None,
) -> Iterable[Problem]:
    def problem(key: tuple[str | int, ...], message: str) -> Problem:
        return Problem(path, format_key(key), lines.line_of(key), message)

    if isinstance(commands, Mapping):
        commands = commands.get(spec.skill.kind, ())

    names = set(spec.actions)
    known = ", ".join(sorted(names))
    for role in ("start", "end", "fallback"):
        value = getattr(spec.skill, role)
        if value not in names:
            yield problem(("skill", role), f"unknown action {value!r} (known: {known})")
    yield from _check_kind(spec, problem)
    if spec.critic is not None:
        if spec.skill.kind != "person":
            yield problem(("critic",), "only person skills take a [critic] (for now)")
        if spec.critic.wait not in names:
            unknown = f"unknown action {spec.critic.wait!r} (known: {known})"
            yield problem(("critic", "wait"), unknown)
        elif spec.critic.wait == spec.skill.end:
            yield problem(("critic", "wait"), "the end action cannot be the critic's WAIT")
        attend = spec.critic.attend
        if attend is not None and attend not in names:
            yield problem(("critic", "attend"), f"unknown action {attend!r} (known: {known})")
        elif attend is not None and attend == spec.skill.end:
            yield problem(
                ("critic", "attend"), "the end action cannot be the one that draws a look"
            )
        gaze = {"looking_away": spec.critic.looking_away, "attend": attend,
                "look_held": spec.critic.look_held,
                "answer_within": spec.critic.answer_within}  # fmt: skip
        given = [key for key, value in gaze.items() if value is not None]
        if given and spec.critic.rule != "readiness":
            yield problem(("critic", given[0]), f"only the readiness rule takes {given[0]}")
        elif given and spec.critic.looking_away is None:
            yield problem(("critic", given[0]), f"{given[0]} needs looking_away (the gaze bar)")
        elif spec.critic.answer_within is not None and attend is None:
            yield problem(("critic", "answer_within"), "answer_within needs attend (the action "
                          "a person answers)")  # fmt: skip
    yield from _check_actions(spec, perception, commands, problem)
    yield from _check_templates(spec, perception, problem)
    if {spec.skill.start, spec.skill.end} <= names and not _reaches(spec):
        yield problem(("skill", "end"), f"no path of `next` leads from start to {spec.skill.end!r}")


def _check_kind(spec: SkillFile, problem: ProblemAt) -> Iterable[Problem]:
    if spec.skill.kind not in ("code", "team") and spec.prompt.ack is None:
        yield problem(("prompt", "ack"), f"a {spec.skill.kind} skill needs the model's ack")
    if spec.skill.kind == "person":
        if spec.prompt.second_stage is None:
            yield problem(("prompt",), "a person skill needs [prompt.second_stage]")
        for name, action in spec.actions.items():
            if action.params:
                yield problem(("actions", name, "params"), "only scene skills take params")
        return
    if spec.skill.kind in ("code", "team"):
        for name, action in spec.actions.items():
            if action.params:
                yield problem(("actions", name, "params"), "only scene skills take params")
        if spec.scene is not None:
            sees = {"code": "the scene the robot API perceives", "team": "its environment's state"}
            yield problem(("scene",), f"a {spec.skill.kind} skill sees "
                          f"{sees[spec.skill.kind]}: no [scene] table")  # fmt: skip
        return
    scene = spec.scene
    if scene is None:
        yield problem(("skill", "kind"), "a scene skill needs a [scene] table (regions)")
        return
    if scene.safe is not None and scene.safe not in scene.regions:
        known = ", ".join(sorted(scene.regions)) or "none"
        yield problem(("scene", "safe"), f"unknown region {scene.safe!r} (known: {known})")


_ACTION_NAME = re.compile(r"\w(?:[\w .-]{0,62}[\w.-])?")


def action_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an action, or None: an action name is letters, digits, ``_``,
    ``-``, ``.`` and single inner spaces (``wait for cue``), at most 64 characters; never a
    quote, bracket, control character or newline (it reaches prompts, the JSON schema,
    Mermaid diagrams and the TOML file)."""
    if _ACTION_NAME.fullmatch(name) and "  " not in name:
        return None
    return (
        f"action name {name!r} is not a name: use letters, digits, '_', '-', '.' and single "
        "inner spaces (at most 64 characters)"
    )


def _check_actions(
    spec: SkillFile,
    perception: set[str],
    commands: Collection[str] | None,
    problem: ProblemAt,
) -> Iterable[Problem]:
    seen_names: dict[str, str] = {}
    seen_refs: dict[str, str] = {}
    seen_phrases: dict[tuple[str, str], str] = {}
    total = 0
    for name, action in spec.actions.items():
        total += len(action.references)
        if total > MAX_REFERENCES:
            count = sum(len(a.references) for a in spec.actions.values())
            yield problem(("actions", name, "references"), f"{count} references, more than "
                          f"{MAX_REFERENCES} a skill may have (each is embedded when the skill "
                          "loads): keep the ones that differ")  # fmt: skip
            break
    for name, action in spec.actions.items():
        key = ("actions", name)
        folded = " ".join(name.lower().split())
        if not folded:
            yield problem(key, "action name is empty")
        elif (wrong := action_name_problem(name)) is not None:
            yield problem(key, wrong)
        elif folded in seen_names:
            yield problem(key, f"duplicate of action {seen_names[folded]!r}")
        seen_names[folded] = name
        is_end = name == spec.skill.end
        if (action.stimuli.type is Stimulus.END) != is_end:
            wanted = '"end"' if is_end else 'not "end" (only the end action\'s is)'
            yield problem((*key, "stimuli", "type"), f"must be {wanted}")
        needs = action.stimuli.type.perception
        if needs and needs not in perception:
            yield problem(
                (*key, "stimuli", "type"), f"needs {needs} perception, which the robot lacks"
            )
        if action.stimuli.type is Stimulus.HIGH_LEVEL and action.stimuli.horizon is None:
            yield problem((*key, "stimuli"), "a 2-B stimulus needs `horizon` (seconds)")
        if commands is not None and action.command not in commands:
            yield problem(
                (*key, "command"),
                f"unknown command {action.command!r} (the robot has: {', '.join(sorted(commands))})",  # noqa: E501
            )
        for i, nxt in enumerate(action.next or []):
            if nxt not in spec.actions:
                yield problem((*key, "next", i), f"unknown action {nxt!r}")
        if not action.references and spec.skill.kind not in ("code", "team"):
            yield problem((*key, "references"), "a reply is mapped onto actions by their "
                          "references: give at least one")  # fmt: skip
        for i, ref in enumerate(action.references):
            folded_ref = " ".join(ref.lower().split())
            if folded_ref in seen_refs:
                yield problem(
                    (*key, "references", i),
                    f"duplicate reference (also in {seen_refs[folded_ref]!r})",
                )
            seen_refs[folded_ref] = name
        for kind in ("verbs", "until", "negated", "holds"):
            for i, phrase in enumerate(getattr(action.lexicon, kind)):
                where = (*key, "lexicon", kind, i)
                if (wrong := lexicon_phrase_problem(phrase)) is not None:
                    yield problem(where, wrong)
                    continue
                folded_phrase = " ".join(phrase.split())
                other = seen_phrases.setdefault((kind, folded_phrase), name)
                if other != name:
                    yield problem(where, f"{phrase!r} is also a lexicon phrase of {other!r}")


_PHRASE = re.compile(r"[a-z'-]+(?: (?:[a-z'-]+|\.\.\.))*")


def lexicon_phrase_problem(phrase: str) -> str | None:
    """Why ``phrase`` cannot be a lexicon phrase, or None: lower-case words (letters, ``'``,
    ``-``) with single spaces, ``...`` standing for up to three words, but not at the end."""
    if _PHRASE.fullmatch(phrase) and not phrase.endswith("..."):
        return None
    return (
        f"lexicon phrase {phrase!r} is not a phrase: use lower-case words and single spaces, "
        "'...' for up to three words between two of them"
    )


def _check_templates(
    spec: SkillFile, perception: set[str], problem: ProblemAt
) -> Iterable[Problem]:
    person = spec.skill.kind == "person"
    observed = {f for f, needs in OBSERVED_FIELDS.items() if needs in perception}
    if not person:
        observed = set()
    goal_fields = set(spec.skill.params) | (set() if person else {"goal"})
    templates: list[tuple[tuple[str | int, ...], str, set[str]]] = [
        (("skill", "goal"), spec.skill.goal, goal_fields),
        (("prompt", "situation"), spec.prompt.situation, {"U", "X"}),
    ]
    second = spec.prompt.second_stage
    if second is not None:
        times = second.wait_times
        if times is not None and len(set(times)) != len(times):
            yield problem(("prompt", "second_stage", "wait_times"), "a wait time is listed twice")
        wait_fields = {"X_a"} if times is None else {"X_a", "W"}
        templates += [
            (("prompt", "second_stage", "wait_time"), second.wait_time, wait_fields),
            (("prompt", "second_stage", "lose_person"), second.lose_person, {"X_a", "T"}),
        ]
    templates += [
        (("actions", n, "text"), a.text, observed | set(a.params)) for n, a in spec.actions.items()
    ]
    for key, text, allowed in templates:
        template = Template(text)
        if not template.is_valid():
            yield problem(key, "bad template: a `$` must start a field name (write `$$` for $)")
            continue
        for name in template.get_identifiers():
            if name not in allowed:
                choices = ", ".join(f"${f}" for f in sorted(allowed)) or "none"
                yield problem(key, f"unknown template field ${name} (available: {choices})")


def _reaches(spec: SkillFile) -> bool:
    everything = list(spec.actions)
    frontier, seen = [spec.skill.start], {spec.skill.start}
    while frontier:
        action = spec.actions[frontier.pop()]
        for nxt in action.next if action.next is not None else everything:
            if nxt in spec.actions and nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return spec.skill.end in seen
