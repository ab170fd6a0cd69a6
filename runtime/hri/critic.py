"""A learned critic over the person skill's decisions (issue 15: ReAd on the robot's own skill).

The seed's critic scores a team's joint action; here the team is one robot and the joint
action is the skill's next action. The state is what the robot knows when a proposal is
checked (:class:`PersonFeatures`): the activity text's MiniLM embedding, the gaze, whether the
person is seen and how far, the action the robot is running and for how long. WAIT, the
critic vocabulary's index 1, is the skill's own wait action (``[critic] wait``), so the
seed's joint advantage reads::

    A(s, a) = Q(s, a) - Q(s, wait) / gamma

:class:`CriticCheck` plugs that into the loop's check seam: a proposal whose first action
scores under ``epsilon`` is refused with its score as feedback, and the runner re-asks within
the skill's ``max_rounds`` (the seed's refinement), then falls back. A state outside the range
seen in training (its gaze, distance, running action and age; not the activity embedding,
whose new wordings are what the held-out scenarios measure) is recorded as such and the score
counts as unknown, not as a verdict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from onboard.base.errors import CriticError
from onboard.collab.card import ABSENT, WAIT, CriticCard, check_card
from onboard.collab.critic import Critic
from onboard.grounding.embedder import DIM, shared_embedder
from onboard.loop.engine import Verdict
from onboard.loop.kind import Observation, Step
from onboard.loop.skill import Skill, SkillCriticSpec

__all__ = [
    "ACTIVITY",
    "AGE_CAP",
    "IDLE",
    "CriticCheck",
    "PersonFeatures",
    "SkillCritic",
    "card_problems",
    "check_skill_card",
    "critic_model_path",
    "critic_vocabulary",
    "feature_names",
    "load_skill_critic",
    "open_skill_critic",
]

FloatArray = npt.NDArray[np.float32]
Embed = Callable[[Sequence[str]], FloatArray]
#: the runner's state before its first action
IDLE = "idle"
#: the activity embedding's features are named ACTIVITY + index (not range-checked: a new
#: wording of a known activity falls outside a per-dimension box)
ACTIVITY = "activity_"
#: an action's age is counted up to this many seconds (longer is "long")
AGE_CAP = 60.0


def critic_vocabulary(skill: Skill, wait: str) -> list[str]:
    """ABSENT, WAIT (the skill's ``wait`` action), then the skill's other actions in order."""
    return [ABSENT, WAIT, *(name for name in skill.actions if name != wait)]


def feature_names(skill: Skill) -> list[str]:
    """The state vector's names, in order (a critic's card lists the same)."""
    return [
        *(f"{ACTIVITY}{k}" for k in range(DIM)),
        "visible",
        "looking_toward",
        "looking_away",
        "distance_m",
        "distance_known",
        *(f"running={name}" for name in (IDLE, *skill.actions)),
        "running_for_s",
    ]


class PersonFeatures:
    """The critic's state vector from a person observation and the running action."""

    def __init__(self, skill: Skill, embed: Embed) -> None:
        self.embed = embed
        self._lock = threading.Lock()  # the embedder's cache is not thread-safe
        self.running = [IDLE, *skill.actions]
        self.names = feature_names(skill)

    def __len__(self) -> int:
        return len(self.names)

    def vector(self, observation: Observation, running: str, since: float) -> FloatArray:
        """``running``: the action under way (or idle) since ``since`` (episode seconds)."""
        activity = getattr(observation, "activity", None)
        toward = getattr(observation, "toward", None)
        distance = getattr(observation, "distance", None)
        out = np.zeros(len(self.names), np.float32)
        if observation.visible and activity:
            with self._lock:
                out[:DIM] = self.embed([activity])[0]
        k = DIM
        out[k] = float(observation.visible)
        out[k + 1] = float(toward is True)
        out[k + 2] = float(toward is False)
        out[k + 3] = 0.0 if distance is None else float(distance)
        out[k + 4] = float(distance is not None)
        k += 5
        out[k + self.running.index(running if running in self.running else IDLE)] = 1.0
        out[-1] = min(max(observation.t - since, 0.0), AGE_CAP)
        return out


class CriticCheck:
    """The loop's check with a learned critic; ``running`` says which action runs since when
    (the runner's :meth:`~onboard.loop.engine.SkillRunner.running`).

    ``rule = "joint"`` (the seed's ReAd-J): a first action whose joint advantage is under
    ``epsilon`` is refused. ``rule = "readiness"``: a plan that reaches the end action
    (``end``) is scored by the end action's own value, the verdict speaking now is expected to
    get (the speak probes make it that), and refused under ``epsilon``; a plan that does not
    lets time pass, and is refused only where the end action scores ``ready`` or more (a ready
    person's moment may not last). Between the two the critic defers to the planner. When it
    is unsure it vouches for less: the score is the lowest of its ``members`` (critics trained
    on parts of the data), and a state outside the training range is scored at the nearest
    state inside it, never used to refuse holding back. ReAd-J's
    ``Q(s, wait) / gamma`` assumes waiting leaves the state as it was, so it refuses every step
    but the end action, a step before speaking too; this rule holds back only speech to a busy
    person and delay before a ready one.

    ``looking_away`` (readiness only) adds memory: speech to a person not looking toward the
    robot needs that score, and no reading under ``epsilon`` since their last look (a pause
    inside a task, "she takes another bite", reads like its end; the state holds one sentence,
    the check remembers). ``look_held``: after such a reading, the look must have lasted that
    long (a glance from a task is no invitation). ``answer_within``: a person still looking
    away that long after the ``attend`` action began did not answer it, and reads busy.
    ``attend`` names the action that draws a look
    (eye contact): a plan that speaks while the bar holds is amended to take it first (its
    speech is checked again after the look, so a busy person who does not look back is never
    spoken to), and where a person looks ready (``ready``) but the bar holds, only it may hold
    back. One check per episode: the memory is this episode's."""

    name = "critic"

    def __init__(
        self,
        critic: Critic,
        features: PersonFeatures,
        wait: str,
        epsilon: float,
        running: Callable[[], tuple[str, float]],
        rule: str = "joint",
        end: str | None = None,
        ready: float | None = None,
        members: Sequence[Critic] = (),
        looking_away: float | Literal["never"] | None = None,
        attend: str | None = None,
        look_held: float | None = None,
        now: Callable[[], float] | None = None,
        answer_within: float | None = None,
    ) -> None:
        if rule == "readiness" and end is None:
            raise CriticError("the readiness rule needs the skill's end action")
        self.critic, self.features, self.epsilon = critic, features, epsilon
        self.running, self.rule, self.end, self.ready = running, rule, end, ready
        self.members = list(members)
        self.looking_away, self.attend, self.look_held = looking_away, attend, look_held
        #: the episode's time now; without it, the observation's (a person's observation
        #: changes only when what is seen changes, so a look held still would not grow)
        self.now = now
        #: a person still looking away this long after ``attend`` began did not answer it
        self.answer_within = answer_within
        #: when the person's current look at the robot began (None: not looking)
        self.look_since: float | None = None
        #: the person scored under epsilon since they last looked toward the robot (this
        #: episode's memory: a pause inside a task reads like its end, a look does not)
        self.busy_since_look = False
        self._index = {name: k for k, name in enumerate(critic.vocabulary)}
        self._index[wait] = self._index[WAIT]

    def score(self, action: str, observation: Observation) -> tuple[float, bool]:
        """The score the rule gives ``action`` now, and whether the state is outside the
        training range (then the value means nothing). Readiness scores every action by the
        end action's value."""
        running, since = self.running()
        state = self.features.vector(observation, running, since)
        if self.rule == "readiness":
            assert self.end is not None
            end = np.asarray([[self._index[self.end]]], np.int64)
            ood = bool(self.critic.ood(state))
            near = self.critic.clip(state)[None]
            q = min(float(c.q(near, end)[0]) for c in (self.critic, *self.members))
            return q, ood
        scored = self.critic.joint_advantage(state, [self._index[action]])
        return scored.value, scored.ood

    def _gaze_bar(self, value: float, observation: Observation) -> str | None:
        """Why speech is held back for the person's gaze (None: it is not), and the episode's
        memory updated: a reading under epsilon marks the person busy until they have looked
        at the robot for ``look_held`` seconds (a glance from a task is no invitation); a
        person not looking needs ``looking_away`` ("never": they are never spoken to)."""
        toward = getattr(observation, "toward", None) is True
        seen = float(observation.t)
        if not toward:
            self.look_since = None
        elif self.look_since is None:
            self.look_since = seen
        now = self.now() if self.now is not None else seen
        held = 0.0 if self.look_since is None else max(0.0, now - self.look_since)
        if toward and held >= (self.look_held or 0.0):
            self.busy_since_look = False
        if value < self.epsilon or (not toward and self._unanswered(now)):
            self.busy_since_look = True
        if self.looking_away is None:
            return None
        if toward:
            if self.busy_since_look:
                return (f"the person looked busy before this look, and has looked at the robot"
                        f" for {held:.1f} s of {self.look_held or 0.0:.1f} s")  # fmt: skip
            return None
        if self.looking_away == "never":
            return "the person is not looking at the robot"
        if self.busy_since_look:
            return "the person has looked busy since they last looked at the robot"
        if value < self.looking_away:
            return (f"the person is not looking at the robot, and speaking scores under"
                    f" {self.looking_away:+.2f} then")  # fmt: skip
        return None

    def _unanswered(self, now: float) -> bool:
        """The attend action runs, begun ``answer_within`` ago or more, and the person has not
        looked back: a person free to talk answers eye contact, a busy one does not."""
        if self.answer_within is None or self.attend is None:
            return False
        running, began = self.running()
        return running == self.attend and now - began >= self.answer_within

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        if self.rule == "readiness":
            return self._readiness(steps, observation)
        action = steps[0].action
        value, ood = self.score(action, observation)
        if ood:
            return Verdict(True, feedback="outside the critic's training range: score unknown")
        if value < self.epsilon:
            return Verdict(False, feedback=self._under(action, value, ""), score=value)
        return Verdict(True, score=value)

    def _under(self, action: str, value: float, where: str) -> str:
        return (f"a critic scored '{action}' {value:+.2f} here{where}, under its threshold"
                f" {self.epsilon:+.2f}: it is unlikely to help now")  # fmt: skip

    def _readiness(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        assert self.end is not None
        actions = [step.action for step in steps]
        value, ood = self.score(self.end, observation)
        bar = self._gaze_bar(value, observation)
        # a plan that draws the person's look before it speaks: its speech is checked again,
        # after the look, before it runs
        speech = actions.index(self.end) if self.end in actions else len(actions)
        attends = self.attend is not None and self.attend in actions[:speech]
        if speech < len(actions):  # a plan that speaks is judged by its speech, moments away
            if value < self.epsilon:
                where = (
                    " (outside its training range: at the nearest state it knows)" if ood else ""
                )
                return Verdict(False, feedback=self._under(self.end, value, where), score=value)
            if bar is not None and not attends:
                amend = None if self.attend is None else (Step(self.attend), *steps[speech:])
                return Verdict(False, feedback=f"a critic scored '{self.end}' {value:+.2f} here,"
                               f" but {bar}: {self._draw_look()}", score=value,
                               amend=amend)  # fmt: skip
            return Verdict(True, score=value)
        if self.ready is None or value < self.ready or ood:
            return Verdict(True, score=value)
        if bar is None:
            return Verdict(
                False,
                feedback=f"a critic scored '{self.end}' {value:+.2f} here, over its threshold"
                f" {self.ready:+.2f}: the person looks ready now, and waiting may lose the moment",
                score=value,
            )
        if self.attend is not None and actions[0] != self.attend:
            return Verdict(
                False,
                feedback=f"a critic scored '{self.end}' {value:+.2f} here, over its threshold"
                f" {self.ready:+.2f}, but {bar}: {self._draw_look()}",
                score=value,
            )
        return Verdict(True, score=value)

    def _draw_look(self) -> str:
        if self.attend is None:
            return "wait until they look at the robot"
        return f"'{self.attend}' first, so that they look at the robot"


def load_skill_critic(path: Path, skill: Skill, wait: str) -> Critic:
    """Load the critic at ``path`` and check its card against the skill (its name, the
    vocabulary the skill's actions make, the feature names); one CriticError line if not."""
    critic = Critic.load(path)
    check_skill_card(path, critic.card, skill, wait)
    critic.guard_only([name for name in critic.card.features if not name.startswith(ACTIVITY)])
    return critic


def check_skill_card(path: Path, card: CriticCard, skill: Skill, wait: str) -> None:
    """One CriticError line naming ``path``, the first problem and the skill, if any."""
    problems = card_problems(card, skill, wait)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CriticError(f"{path}: {problems[0]} (skill {skill.path}){more}")


def card_problems(card: CriticCard, skill: Skill, wait: str) -> list[str]:
    """Where a card disagrees with what the skill gives it; empty when it fits."""
    vocabulary = critic_vocabulary(skill, wait)
    problems = check_card(card, skill.name, card.level, vocabulary, feature_names(skill))
    if len(card.agents) != 1:
        problems.append(f"a skill's critic scores one robot; the card names {card.agents}")
    return problems


class SkillCritic:
    """A skill's critic, opened once, ready to make each episode's :class:`CriticCheck`."""

    def __init__(
        self,
        critic: Critic,
        features: PersonFeatures,
        spec: SkillCriticSpec,
        end: str,
        members: Sequence[Critic] = (),
    ) -> None:
        self.critic, self.features, self.spec, self.end = critic, features, spec, end
        self.members = list(members)

    @property
    def path(self) -> Path:
        return self.critic.path

    @property
    def epsilon(self) -> float:
        return self.spec.epsilon

    def check(
        self, running: Callable[[], tuple[str, float]], now: Callable[[], float] | None = None
    ) -> CriticCheck:
        s = self.spec
        return CriticCheck(self.critic, self.features, s.wait, s.epsilon, running, s.rule,
                           self.end, s.ready, self.members, s.looking_away, s.attend,
                           s.look_held, now, s.answer_within)  # fmt: skip


def critic_model_path(model: str) -> Path:
    """``[critic] model``: absolute, or relative to the folder holding the shipped models/."""
    from onboard.bundled import package_path

    path = Path(model)
    return path if path.is_absolute() else package_path("onboard.models").parent / path


_critics: dict[tuple[Path, str, str], Critic] = {}
_opened: dict[tuple[Path, Path, str, str], SkillCritic] = {}
_opening = threading.Lock()


def open_skill_critic(skill: Skill, embedder_dir: Path, threads: int = 1) -> SkillCritic | None:
    """The critic the skill's ``[critic]`` names (None without one), checked against the
    skill; each embedder and model opened once (an evaluation runs many episodes, a threshold
    search many settings of the same models)."""
    spec = skill.critic
    if spec is None:
        return None
    path = critic_model_path(spec.model)
    source = skill.source or str(skill.path)
    key = (path, embedder_dir, source, spec.model_dump_json())
    with _opening:
        if key not in _opened:
            features = PersonFeatures(skill, shared_embedder(embedder_dir, threads).embed)

            def load(model: Path) -> Critic:
                if (model, source, spec.wait) not in _critics:
                    _critics[model, source, spec.wait] = load_skill_critic(model, skill, spec.wait)
                return _critics[model, source, spec.wait]

            members = [load(critic_model_path(m)) for m in spec.members]
            _opened[key] = SkillCritic(load(path), features, spec, skill.end, members)
        return _opened[key]
