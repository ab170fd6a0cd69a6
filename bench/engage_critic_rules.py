"""Two rules for the Engage critic's check, side by side: the seed's and one without 1/gamma.

    .venv/bin/python bench/engage_critic_rules.py [--tune-trials 5]

The shipped rule is ReAd-J's joint advantage, ``Q(s, a) - Q(s, wait) / gamma``, which refuses
the skill's wait itself wherever waiting is worth anything. The other rule scores against
waiting, ``Q(s, a) - Q(s, wait)``, and never refuses the wait (its score is 0 by definition):
the question is whether it lets a planner that puts a step before speaking (eye contact, a
wait) reach its `speak`. Its threshold is chosen the way the shipped one was, on the training
scenarios with the random proposer (the most successes); then both rules run on the shipped
scenarios (random proposer; the stand-in, noiseless and at its default noise) and on the
held-out ones (random proposer). The same shipped critic model scores both. One run, a few
minutes on 2 cores; prints a table and writes bench/results/engage_critic_rules.json.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from _common import ROOT, robot_and_skill, write_results
from rich.console import Console
from rich.table import Table

from onboard.collab.card import WAIT
from onboard.hri.checks import PersonVisible
from onboard.hri.critic import CriticCheck, SkillCritic, open_skill_critic
from onboard.hri.scenario import Scenario, load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, judge, make_mapper, run_episode
from onboard.llm.client import ChatClient
from onboard.loop.engine import Ask, SkillRunner, Verdict
from onboard.loop.kind import Observation, Step
from onboard.loop.recorder import MemoryRecorder
from onboard.testing.random_ask import RandomAsk
from onboard.testing.standin_server import StandInServer

GRID = (-0.2, -0.1, -0.05, 0.0, 0.05, 0.1, 0.2)
SHIPPED = ("person-robot", "person-object", "person-environment", "person-person")


class AgainstWait(CriticCheck):
    """``Q(s, a) - Q(s, wait)``; the wait itself is always allowed."""

    def score(self, action: str, observation: Observation) -> tuple[float, bool]:
        running, since = self.running()
        state = self.features.vector(observation, running, since)
        rows = np.asarray([[self._index[WAIT]], [self._index[action]]], np.int64)
        q = self.critic.q(np.stack([state, state]), rows)
        return float(q[1] - q[0]), bool(self.critic.ood(state))

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        if self._index[steps[0].action] == self._index[WAIT]:
            return Verdict(True, score=0.0)
        return super().check(steps, observation)


RULES: dict[str, type[CriticCheck]] = {
    "seed: Q(s,a) - Q(s,wait)/gamma (shipped)": CriticCheck,
    "against wait: Q(s,a) - Q(s,wait)": AgainstWait,
}
Proposer = Callable[[int], Any]  # a seed -> a context manager giving an Ask


@contextmanager
def random_proposer(seed: int) -> Iterator[Ask]:
    yield RandomAsk(seed)


def standin(noise: float) -> Proposer:
    @contextmanager
    def make(seed: int) -> Iterator[Ask]:
        robot, _ = robot_and_skill("engage")
        with (
            StandInServer(seed=seed, noise=noise, format_noise=0.0) as server,
            ChatClient(robot.llm, base_url=server.base_url) as client,
        ):
            yield HttpAsk(client)

    return make


@dataclass
class Row:
    rule: str
    epsilon: float
    proposer: str
    scenarios: str
    episodes: int
    kinds: dict[str, int]
    vetoes: float

    @property
    def successes(self) -> int:
        return self.kinds.get("success", 0)


def run(
    critic: SkillCritic,
    rule: type[CriticCheck],
    epsilon: float,
    scenarios: list[Scenario],
    proposer: Proposer,
    trials: int,
) -> tuple[dict[str, int], float, int]:
    robot, skill = robot_and_skill("engage")
    mapper = make_mapper(robot, skill)
    options = EpisodeOptions(constrained=True, latency=1.0, keep_candidates=False)
    kinds: Counter[str] = Counter()
    vetoes = 0
    for s_index, scenario in enumerate(scenarios):
        for k in range(trials):
            runners: list[SkillRunner] = []

            def running(runners: list[SkillRunner] = runners) -> tuple[str, float]:
                return runners[0].running() if runners else ("idle", 0.0)

            check = rule(critic.critic, critic.features, critic.wait, epsilon, running)
            with proposer(s_index * 1000 + k) as ask, MemoryRecorder() as recorder:
                outcome = run_episode(robot, skill, scenario, ask, mapper, recorder, options,
                                      checks=[PersonVisible(skill.end), check],
                                      on_runner=runners.append)  # fmt: skip
            kinds[judge(outcome, scenario).kind.value] += 1
            vetoes += outcome.refused.get("critic", 0)
    episodes = len(scenarios) * trials
    return dict(kinds), vetoes / episodes, episodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tune-trials", type=int, default=5)
    args = parser.parse_args()
    robot, skill = robot_and_skill("engage")
    critic = open_skill_critic(skill, robot.embedder_dir)
    if critic is None or skill.critic is None:
        raise SystemExit(f"{skill.path}: no [critic]")
    training = ROOT / "bench/data/engage-train/scenarios"
    train = [load_scenario(p) for p in sorted(training.glob("*.toml"))]
    shipped = [load_scenario(ROOT / "skills/scenarios" / f"{n}.toml") for n in SHIPPED]
    held = [load_scenario(p) for p in sorted((ROOT / "skills/scenarios/heldout").glob("*.toml"))]
    rows: list[Row] = []
    chosen = {}
    for name, rule in RULES.items():
        if rule is CriticCheck:
            chosen[name] = skill.critic.epsilon  # chosen by models/critics/engage_epsilon.py
            continue
        tuned = []
        for epsilon in GRID:
            kinds, vetoes, n = run(critic, rule, epsilon, train, random_proposer, args.tune_trials)
            tuned.append(Row(name, epsilon, "random", "training", n, kinds, vetoes))
        rows += tuned
        chosen[name] = max(tuned, key=lambda r: (r.successes, -r.vetoes)).epsilon
    cases: list[tuple[str, str, list[Scenario], Proposer, int]] = [
        ("random", "shipped", shipped, random_proposer, 10),
        ("stand-in, noiseless", "shipped", shipped, standin(0.0), 1),
        ("stand-in, noise 0.15", "shipped", shipped, standin(0.15), 10),
        ("random", "held-out", held, random_proposer, 4),
    ]
    for name, rule in RULES.items():
        for proposer_name, group, scenarios, proposer, trials in cases:
            kinds, vetoes, n = run(critic, rule, chosen[name], scenarios, proposer, trials)
            rows.append(Row(name, chosen[name], proposer_name, group, n, kinds, vetoes))
    table = Table(title="Engage critic: two check rules, one critic model")
    for column in ("rule", "epsilon", "proposer", "scenarios", "successes", "never spoke",
                   "spoke not ready", "vetoes / episode"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("rule", "proposer") else "right")
    for r in rows:
        table.add_row(r.rule, f"{r.epsilon:+.2f}", r.proposer, r.scenarios,
                      f"{r.successes}/{r.episodes}", str(r.kinds.get("never_spoke", 0)),
                      str(r.kinds.get("spoke_not_ready", 0)), f"{r.vetoes:.1f}")  # fmt: skip
    Console(width=150).print(table)
    results = [r.__dict__ | {"successes": r.successes} for r in rows]
    out = write_results("engage_critic_rules", {"chosen": chosen, "rows": results})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
