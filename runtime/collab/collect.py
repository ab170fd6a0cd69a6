"""A critic's training data: the behaviour policy's episodes, augmented (critic collect).

The seed estimates ``Q_mu`` of the LLM planner's policy ``mu`` from a dataset collected by
following it, augmented with trajectories that cover actions ``mu`` rarely takes (its §E.6).
Here:

- **behaviour episodes**: the LLM over HTTP (the stand-in, the local model, any endpoint)
  plans each step as Central Plan does (one joint request, no critic), through the same
  episode runner as every method, recorded; the dataset takes each environment step from the
  recording (the features before it, the joint action, the reward);
- **augmented episodes** (share ``augment``): no LLM; each step is the joint WAIT with
  probability ``wait``, otherwise each agent in task order takes a uniformly drawn action of
  the vocabulary (WAIT included, infeasible ones too: they run as WAIT) with probability
  ``explore``, WAITs with probability ``agent_wait``, else takes one of the environment
  oracle's useful actions. They put in the data what
  the planner rarely does (doing nothing, moving the wrong thing) next to what helps, so the
  critic has seen the actions it is asked to score. The oracle is used only here, to make
  data; never by a planner.

Every episode has its own seed; the same settings give the same file.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from onboard.collab.dataset import Dataset, DatasetMeta
from onboard.collab.envs import WAIT, TeamEnv, make_env
from onboard.collab.probes import LLMPolicy, Policy, ProbeSettings, probe
from onboard.collab.taskfile import TeamTask
from onboard.loop.recorder import Recorder

__all__ = ["CollectSettings", "Transition", "augmented_episode", "behaviour_episode", "collect",
           "explore_joint"]  # fmt: skip


@dataclass(frozen=True)
class CollectSettings:
    episodes: int = 200
    #: share of the episodes that are augmented (no LLM)
    augment: float = 0.4
    #: in an augmented episode, the chance an agent's action is drawn uniformly
    explore: float = 0.4
    #: in an augmented episode, the chance a step is the joint WAIT
    wait: float = 0.1
    #: in an augmented episode, the chance one agent WAITs (when WAIT is not what helps, the
    #: planner's likeliest mistake: without it a critic learns "WAIT is good", as the data's
    #: WAITs are mostly the useful ones: holding the dustpan while the broom sweeps)
    agent_wait: float = 0.25
    seed: int = 0
    #: ask the LLM for constrained JSON (one enum of actions per agent)
    constrained: bool = False


@dataclass(frozen=True)
class Transition:
    features: list[float]
    joint: dict[str, str]
    reward: float


def explore_joint(
    env: TeamEnv,  # type: ignore[type-arg]
    rng: random.Random,
    settings: CollectSettings,
    fixed: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The augmented policy's joint action now (see the module's doc); the agents in
    ``fixed`` take those actions."""
    if not fixed and rng.random() < settings.wait:
        return {agent: WAIT for agent in env.agents}
    actions = env.vocabulary[1:]  # not ABSENT
    joint: dict[str, str] = {}
    for agent in env.agents:
        if fixed and agent in fixed:
            joint[agent] = fixed[agent]
        else:
            draw = rng.random()
            if draw < settings.explore:
                joint[agent] = rng.choice(actions)
            elif draw < settings.explore + settings.agent_wait:
                joint[agent] = WAIT
            else:
                joint[agent] = rng.choice(env.useful(agent, joint))
    return joint


def augmented_episode(
    env: TeamEnv,  # type: ignore[type-arg]
    seed: int,
    settings: CollectSettings,
) -> list[Transition]:
    """One exploring episode (see the module's doc)."""
    rng = random.Random(f"augment/{seed}")
    env.reset(seed)
    out = []
    while not env.done:
        features = [float(x) for x in env.features()]
        joint = explore_joint(env, rng, settings)
        result = env.step(joint)
        out.append(Transition(features, joint, float(result.reward)))
    return out


def behaviour_episode(
    task: TeamTask,
    level: str,
    env: TeamEnv,  # type: ignore[type-arg]
    llm: object,
    seed: int,
    settings: CollectSettings,
) -> list[Transition]:
    """One episode planned by the LLM as Central Plan plans (see the module's doc), read
    back from its recording."""
    from onboard.collab.episode import TeamSettings, run_team_episode
    from onboard.collab.methods import method

    recorder = Recorder(None)  # in memory
    run_team_episode(
        env, method("central_plan"), llm,  # type: ignore[arg-type]
        None, TeamSettings(task, level, constrained=settings.constrained), recorder, seed,
    )  # fmt: skip
    records = recorder.records
    return [
        Transition([float(x) for x in r["features"]], dict(r["joint"]), float(r["reward"]))
        for r in records
        if r["kind"] == "env_step"
    ]


def collect(
    task: TeamTask,
    level: str,
    llm: object | None,
    settings: CollectSettings = CollectSettings(),
    behaviour: str = "",
    progress: Callable[[int], None] = lambda done: None,
    probes: ProbeSettings | None = None,
    probe_progress: Callable[[int], None] = lambda done: None,
) -> Dataset:
    """``settings.episodes`` episodes of ``task`` at ``level`` as a dataset. ``llm`` answers
    the behaviour episodes (a ChatClient); None makes every episode augmented. With
    ``probes``, Monte Carlo values at ``probes.states`` held-out states (seeds apart from the
    episodes'), the rollouts under the LLM's policy (without an LLM: the augmented one's)."""
    env = make_env(task, level, starts="training")  # never a start state evaluation uses
    rng = random.Random(f"collect/{task.name}/{level}/{settings.seed}")
    seeds = rng.sample(range(1_000_000), settings.episodes)
    kinds = [llm is None or rng.random() < settings.augment for _ in seeds]
    states, actions, rewards, episode, t = [], [], [], [], []
    for number, (seed, augmented) in enumerate(zip(seeds, kinds, strict=True)):
        steps = (
            augmented_episode(env, seed, settings)
            if augmented
            else behaviour_episode(task, level, env, llm, seed, settings)
        )
        for i, step in enumerate(steps):
            states.append(step.features)
            actions.append([env.action_index(step.joint.get(a, WAIT)) for a in env.agents])
            rewards.append(step.reward)
            episode.append(number)
            t.append(i)
        progress(number + 1)
    found, probe_seeds, probe_policy = None, [], ""
    if probes is not None and probes.states > 0:
        probe_seeds = rng.sample(range(1_000_000, 2_000_000), probes.states)
        if llm is None:
            explore = random.Random(f"probe-rollouts/{task.name}/{level}/{settings.seed}")
            policy: Policy = lambda env, fixed: explore_joint(env, explore, settings, fixed)  # noqa: E731
            probe_policy = "the augmented policy (no LLM)"
        else:
            policy = LLMPolicy(task, llm, settings.constrained)
            probe_policy = behaviour or "central_plan by the LLM"
        env.starts = "held_out"  # the card's figures come from states never trained on
        found = probe(task, env, policy, probe_seeds, probes, probe_progress)
    reach = getattr(env, "reach", None)
    meta = DatasetMeta(
        task=task.name,
        level=level,
        reach=None if reach is None else {a: sorted(r) for a, r in reach.items()},
        starts="training",
        agents=list(env.agents),
        vocabulary=list(env.vocabulary),
        feature_names=list(env.feature_names),
        behaviour=behaviour or ("augmented only" if llm is None else "llm"),
        seeds=seeds,
        augmentation=round(sum(kinds) / max(len(kinds), 1), 4),
        probe_seeds=probe_seeds,
        probe_rollouts=0 if found is None or probes is None else probes.rollouts,
        probe_policy=probe_policy,
    )
    return Dataset(
        np.asarray(states, dtype=np.float32).reshape(len(rewards), len(env.feature_names)),
        np.asarray(actions, dtype=np.int64).reshape(len(rewards), len(env.agents)),
        np.asarray(rewards, dtype=np.float32),
        np.asarray(episode, dtype=np.int64),
        np.asarray(t, dtype=np.int64),
        meta,
        found,
    )
