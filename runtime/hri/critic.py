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

import numpy as np
import numpy.typing as npt

from onboard.base.errors import CriticError
from onboard.collab.card import ABSENT, WAIT, CriticCard, check_card
from onboard.collab.critic import Critic
from onboard.grounding.embedder import DIM, Embedder
from onboard.loop.engine import Verdict
from onboard.loop.kind import Observation, Step
from onboard.loop.skill import Skill

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
    """The loop's check with a learned critic: refuses a first action whose joint advantage
    is under ``epsilon``; ``running`` says which action runs since when (the runner's
    :meth:`~onboard.loop.engine.SkillRunner.running`)."""

    name = "critic"

    def __init__(
        self,
        critic: Critic,
        features: PersonFeatures,
        wait: str,
        epsilon: float,
        running: Callable[[], tuple[str, float]],
    ) -> None:
        self.critic, self.features, self.epsilon = critic, features, epsilon
        self.running = running
        self._index = {name: k for k, name in enumerate(critic.vocabulary)}
        self._index[wait] = self._index[WAIT]

    def score(self, action: str, observation: Observation) -> tuple[float, bool]:
        """The advantage of ``action`` now, and whether the state is outside the training
        range (then the value means nothing)."""
        running, since = self.running()
        state = self.features.vector(observation, running, since)
        scored = self.critic.joint_advantage(state, [self._index[action]])
        return scored.value, scored.ood

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        action = steps[0].action
        value, ood = self.score(action, observation)
        if ood:
            return Verdict(True, feedback="outside the critic's training range: score unknown")
        if value < self.epsilon:
            return Verdict(
                False,
                feedback=f"a critic scored '{action}' {value:+.2f} here, under its threshold"
                f" {self.epsilon:+.2f}: it is unlikely to help now",
                score=value,
            )
        return Verdict(True, score=value)


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

    def __init__(self, critic: Critic, features: PersonFeatures, wait: str, epsilon: float):
        self.critic, self.features, self.wait, self.epsilon = critic, features, wait, epsilon

    @property
    def path(self) -> Path:
        return self.critic.path

    def check(self, running: Callable[[], tuple[str, float]]) -> CriticCheck:
        return CriticCheck(self.critic, self.features, self.wait, self.epsilon, running)


def critic_model_path(model: str) -> Path:
    """``[critic] model``: absolute, or relative to the folder holding the shipped models/."""
    from onboard.bundled import package_path

    path = Path(model)
    return path if path.is_absolute() else package_path("onboard.models").parent / path


_opened: dict[tuple[Path, Path, str, float], SkillCritic] = {}
_opening = threading.Lock()


def open_skill_critic(skill: Skill, embedder_dir: Path, threads: int = 1) -> SkillCritic | None:
    """The critic the skill's ``[critic]`` names (None without one), checked against the
    skill; opened once per model, skill and embedder (an evaluation runs many episodes)."""
    spec = skill.critic
    if spec is None:
        return None
    path = critic_model_path(spec.model)
    key = (path, embedder_dir, skill.source or str(skill.path), spec.epsilon)
    with _opening:
        if key not in _opened:
            embedder = Embedder(embedder_dir, threads=threads)
            features = PersonFeatures(skill, embedder.embed)
            critic = load_skill_critic(path, skill, spec.wait)
            _opened[key] = SkillCritic(critic, features, spec.wait, spec.epsilon)
        return _opened[key]
