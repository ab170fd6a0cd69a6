"""Monte Carlo advantages on held-out probe states: what a critic's advantages are checked against.

Held-out transitions seldom share a state, so advantages cannot be read off the dataset.
Instead, for probe states reached by the behaviour policy on seeds the training never saw,
the simulator is snapshotted and each candidate is rolled out ``rollouts`` times, every
rollout continuing under the behaviour policy (the LLM asked as Central Plan asks):

- the first agent's candidates ``a_1`` (WAIT, up to two of the oracle's useful actions, the
  rest drawn from the vocabulary): the other agents' first actions are the LLM's, asked one
  agent at a time with ``a_1`` as chosen (the ``Q(s, a_1)`` of the seed, the complement from
  the behaviour policy); ``MC A_1 = MC Q(s, a_1) - MC V(s)``;
- joint candidates (the joint WAIT first, the oracle's joint action, uniform ones):
  ``MC A = MC Q(s, a) - MC Q(s, w) / gamma``, the seed's joint advantage.

``MC V(s)`` is the mean return of ``rollouts`` plain behaviour rollouts. The LLM is asked
without the ``## History`` section (the team stand-in does not read it; a real model might
plan otherwise with it).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onboard.base.errors import LLMReplyError
from onboard.collab.dataset import Probes
from onboard.collab.envs import WAIT, TeamEnv
from onboard.collab.prompts import (
    Situation,
    agent_request,
    joint_request,
    read_reply,
    reply_schema,
)
from onboard.collab.taskfile import TeamTask

__all__ = ["LLMPolicy", "ProbeSettings", "oracle_joint", "probe", "rollout"]

Env = TeamEnv[Any]
Policy = Callable[[Any, Mapping[str, str]], dict[str, str]]


@dataclass(frozen=True)
class ProbeSettings:
    states: int = 24
    rollouts: int = 10
    #: candidates of the first agent per state (WAIT and up to two useful ones among them)
    first: int = 4
    #: joint candidates per state (the joint WAIT and the oracle's among them)
    joint: int = 3
    gamma: float = 0.95
    seed: int = 0


class LLMPolicy:
    """The behaviour policy: one joint request as Central Plan asks it; with some agents'
    actions fixed, the others asked one at a time with the earlier ones as chosen."""

    def __init__(self, task: TeamTask, llm: Any, constrained: bool = False) -> None:
        self.task, self.llm, self.constrained = task, llm, constrained
        self.requests = 0

    def __call__(self, env: Env, fixed: Mapping[str, str]) -> dict[str, str]:
        situation = Situation(self.task, env.describe(), env.vocabulary)
        if not fixed:
            agents = list(env.agents)
            return self._ask(joint_request(situation, agents, constrained=self.constrained),
                             env, agents)  # fmt: skip
        joint = dict(fixed)
        for agent in env.agents:
            if agent in joint:
                continue
            chosen = {a: joint[a] for a in env.agents if a in joint}
            messages = agent_request(situation, agent, chosen=chosen, constrained=self.constrained)
            joint.update(self._ask(messages, env, [agent]))
        return joint

    def _ask(self, messages: Any, env: Env, agents: list[str]) -> dict[str, str]:
        self.requests += 1
        own = {agent: env.agent_actions(agent) for agent in agents}
        schema = reply_schema(own) if self.constrained else None
        text = self.llm.complete(messages, schema).text
        try:
            return read_reply(text, agents, env.vocabulary)
        except LLMReplyError:  # an unreadable reply: the agents wait, as the loops fall back
            return {agent: WAIT for agent in agents}


def oracle_joint(env: Env) -> dict[str, str]:
    """Each agent in order takes the oracle's first useful action given the earlier ones."""
    joint: dict[str, str] = {}
    for agent in env.agents:
        joint[agent] = env.useful(agent, joint)[0]
    return joint


def rollout(
    env: Env, snap: object, first: Mapping[str, str], policy: Policy, gamma: float
) -> float:
    """The discounted return from ``snap``: the first step's actions ``first`` (the rest from
    ``policy``), every later step ``policy``'s."""
    env.restore(snap)
    total, discount = 0.0, 1.0
    joint = policy(env, first)
    while True:
        total += discount * env.step(joint).reward
        discount *= gamma
        if env.done:
            return total
        joint = policy(env, {})


def _reach(env: Env, seed: int, policy: Policy, rng: random.Random) -> object:
    """A state of the behaviour policy's episode from ``seed`` after a random number of
    steps (within the first half of the step limit; the last one short of the end)."""
    env.reset(seed)
    snap = env.snapshot()
    for _ in range(rng.randrange(env.step_limit // 2 + 1)):
        env.step(policy(env, {}))
        if env.done:
            break
        snap = env.snapshot()
    env.restore(snap)
    return snap


def probe(
    task: TeamTask,
    env: Env,
    policy: Policy,
    seeds: Sequence[int],
    settings: ProbeSettings,
    progress: Callable[[int], None] = lambda done: None,
) -> Probes:
    """Monte Carlo advantages at one probe state per seed (see the module's doc)."""
    rng = random.Random(f"probe/{task.name}/{env.level}/{settings.seed}")
    n, first_agent = len(env.agents), env.agents[0]
    actions = list(env.vocabulary[1:])  # not ABSENT
    k = min(settings.first, len(actions))
    states, value, first, first_q, useful, joints, joint_q = [], [], [], [], [], [], []
    for number, seed in enumerate(seeds):
        snap = _reach(env, seed, policy, rng)
        states.append(env.features())
        helpful = [a for a in env.useful(first_agent) if a != WAIT][:2]
        candidates = [WAIT, *helpful]
        rest = [a for a in actions if a not in candidates]
        candidates += rng.sample(rest, k - len(candidates))
        oracle = oracle_joint(env)
        joint_candidates = [{a: WAIT for a in env.agents}]
        if oracle not in joint_candidates:
            joint_candidates.append(oracle)
        while len(joint_candidates) < settings.joint:
            draw = {a: rng.choice(actions) for a in env.agents}
            if draw not in joint_candidates:
                joint_candidates.append(draw)

        def mc(fixed: Mapping[str, str], snap: object = snap) -> float:
            returns = [rollout(env, snap, fixed, policy, settings.gamma)
                       for _ in range(settings.rollouts)]  # fmt: skip
            return float(np.mean(returns))

        value.append(mc({}))
        first.append([env.action_index(a) for a in candidates])
        first_q.append([mc({first_agent: a}) for a in candidates])
        useful.append([int(a in helpful) for a in candidates])
        joints.append([[env.action_index(j[a]) for a in env.agents] for j in joint_candidates])
        joint_q.append([mc(j) for j in joint_candidates])
        progress(number + 1)
    return Probes(
        states=np.asarray(states, np.float32).reshape(len(seeds), len(env.feature_names)),
        value=np.asarray(value, np.float32),
        first=np.asarray(first, np.int64).reshape(len(seeds), k),
        first_q=np.asarray(first_q, np.float32).reshape(len(seeds), k),
        first_useful=np.asarray(useful, np.int64).reshape(len(seeds), k),
        joints=np.asarray(joints, np.int64).reshape(len(seeds), -1, n),
        joint_q=np.asarray(joint_q, np.float32).reshape(len(seeds), -1),
    )
