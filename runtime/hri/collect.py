"""A person skill's critic data: episodes of a random behaviour policy on training scenarios.

Each episode runs through :func:`onboard.hri.session.run_episode` on the virtual clock, the
same runner, event manager and mapper as every evaluation, with the LLM replaced by the
behaviour policy the caller gives (``onboard critic collect`` gives
:class:`~onboard.testing.random_ask.RandomAsk`: random choices within the request's schema).
A pass-through check sees every proposal as the critic would (the same
:class:`~onboard.hri.critic.PersonFeatures` at the same moment) and keeps its state and first
action: one transition. The episode's judgement is the reward of its last transition:

- +1 when the robot spoke while the scenario's label was ok-to-engage or ready;
- -1 when it spoke while not ready, out of sight, or outside every label;
- 0 when it never spoke (or was stopped).

Speaking ends an episode, so a uniform policy seldom sees a scenario's later moments: each
episode draws how much the policy favours speaking (``speak_weights``, against 1 for each
other action), which spreads the first speech over the whole scenario.

Speaking also ends the episode with a verdict that depends only on the moment: the label then
and whether the person was in sight (:func:`~onboard.hri.session.judge_speech`, the judge's
own rule). So every checked state also gives a **speak probe**: a one-step episode of the end
action from that state with the reward its verdict carries, whatever the policy chose there.
Without them the critic sees speech mostly where a random policy speaks (early, while busy
people are busy); with them it sees it in every state the episodes reach.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from onboard.collab.dataset import Dataset, DatasetMeta
from onboard.config import RobotConfig
from onboard.hri.checks import PersonVisible
from onboard.hri.critic import PersonFeatures, critic_vocabulary
from onboard.hri.scenario import Scenario
from onboard.hri.session import (
    EpisodeOptions,
    JudgementKind,
    judge,
    judge_speech,
    make_mapper,
    run_episode,
)
from onboard.loop.engine import Ask, Check, SkillRunner, Verdict
from onboard.loop.kind import Observation, Step
from onboard.loop.recorder import MemoryRecorder
from onboard.loop.skill import Skill

__all__ = ["AGENT", "Behaviour", "PersonCollectSettings", "collect_person_data", "reward_of"]

AGENT = "robot"  # a skill's critic scores one agent
#: the behaviour policy: an episode's LLM from its seed and how much it favours the end action
#: (its weight against 1 for each other action)
Behaviour = Callable[[int, Mapping[str, float]], Ask]


@dataclass(frozen=True)
class PersonCollectSettings:
    episodes: int = 20  # per scenario
    seed: int = 0
    speak_weights: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0)
    latency: float = 1.0  # virtual seconds per reply, as the stand-in's evaluation has
    level: str = "all"  # the card's level: a skill's critic covers all its scenarios
    speak_probes: bool = True  # a one-step speak episode from every checked state
    behaviour: str = "random within the schema"  # the behaviour policy, as the card names it


def reward_of(kind: JudgementKind) -> float:
    if kind is JudgementKind.SUCCESS:
        return 1.0
    if kind in (JudgementKind.NEVER_SPOKE, JudgementKind.STOPPED):
        return 0.0
    return -1.0


class _Observer:
    """A check that refuses nothing and keeps what the critic would have scored."""

    name = "collect"

    def __init__(self, features: PersonFeatures, index: dict[str, int]) -> None:
        self.features, self.index = features, index
        self.runner: SkillRunner | None = None
        self.rows: list[tuple[np.ndarray, int]] = []
        self.moments: list[tuple[float, bool]] = []  # each row's time and visibility

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        assert self.runner is not None
        running, since = self.runner.running()
        state = self.features.vector(observation, running, since)
        self.rows.append((state, self.index[steps[0].action]))
        self.moments.append((observation.t, observation.visible))
        return Verdict(True)


def collect_person_data(
    robot: RobotConfig,
    skill: Skill,
    scenarios: Sequence[Scenario],
    features: PersonFeatures,
    wait: str,
    behaviour: Behaviour,
    settings: PersonCollectSettings = PersonCollectSettings(),
    progress: Callable[[int], None] | None = None,
) -> Dataset:
    """``settings.episodes`` episodes of each scenario; one transition per checked proposal.

    ``behaviour(seed, weights)`` makes each episode's LLM (``weights`` tilts its choice of
    the end action, so first speeches spread over the scenario)."""
    vocabulary = critic_vocabulary(skill, wait)
    index = {name: k for k, name in enumerate(vocabulary)}
    index[wait] = 1  # WAIT
    mapper = make_mapper(robot, skill)
    # the episodes run without the skill's own critic: the observer stands where it would
    skill = dataclasses.replace(skill, critic=None)
    options = EpisodeOptions(constrained=True, latency=settings.latency, keep_candidates=False)
    states, actions, rewards, episode_ids, steps = [], [], [], [], []
    probes: list[np.ndarray] = []
    probe_rewards: list[float] = []
    done = 0
    for s_index, scenario in enumerate(scenarios):
        for k in range(settings.episodes):
            seed = settings.seed * 1_000_003 + s_index * 1009 + k
            weight = random.Random(f"weight/{seed}").choice(settings.speak_weights)
            observer = _Observer(features, index)
            checks: list[Check] = [PersonVisible(skill.end), observer]

            def bind(runner: SkillRunner, observer: _Observer = observer) -> None:
                observer.runner = runner

            with MemoryRecorder() as recorder:
                outcome = run_episode(
                    robot, skill, scenario, behaviour(seed, {skill.end: weight}), mapper,
                    recorder, options, checks=checks, on_runner=bind,
                )  # fmt: skip
            reward = reward_of(judge(outcome, scenario).kind)
            for t, (state, action) in enumerate(observer.rows):
                states.append(state)
                actions.append(action)
                rewards.append(reward if t == len(observer.rows) - 1 else 0.0)
                episode_ids.append(done)
                steps.append(t)
            done += 1
            if settings.speak_probes:
                for (state, _), (at, visible) in zip(observer.rows, observer.moments, strict=True):
                    probes.append(state)
                    probe_rewards.append(reward_of(judge_speech(scenario, at, visible).kind))
            if progress is not None:
                progress(done)
    for k, (state, reward) in enumerate(zip(probes, probe_rewards, strict=True)):
        states.append(state)
        actions.append(index[skill.end])
        rewards.append(reward)
        episode_ids.append(done + k)
        steps.append(0)
    described = f"{settings.behaviour}, speak weighted {list(settings.speak_weights)}"
    if settings.speak_probes:
        described += f"; a speak probe from each checked state ({len(probes)})"
    meta = DatasetMeta(
        task=skill.name,
        level=settings.level,
        agents=[AGENT],
        vocabulary=vocabulary,
        feature_names=features.names,
        behaviour=described,
        seeds=[settings.seed],
        augmentation=0.0,
        probe_rollouts=0,
    )
    return Dataset(
        np.asarray(states, np.float32).reshape(-1, len(features)),
        np.asarray(actions, np.int64).reshape(-1, 1),
        np.asarray(rewards, np.float32),
        np.asarray(episode_ids, np.int64),
        np.asarray(steps, np.int64),
        meta,
    )
