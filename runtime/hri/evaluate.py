"""Run scenarios N times on the virtual clock and count what the seed's Tables III-VI count.

The default evaluation is two groups of scenarios, reported apart: the seed's four
(``shipped``) and the held-out ones (``skills/scenarios/heldout/``, written by someone who
saw only the action texts; bench/data/heldout-v2 is their source and a test holds the copies
to it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.critic import CriticCheck
from onboard.hri.scenario import HELD_OUT, Scenario
from onboard.hri.session import (
    EpisodeOptions,
    JudgementKind,
    episode_exit_code,
    judge,
    run_episode,
)
from onboard.loop.engine import Ask
from onboard.loop.exitcodes import ExitCode
from onboard.loop.paths import inside, safe_name
from onboard.loop.recorder import MemoryRecorder, Recorder
from onboard.loop.skill import Skill

__all__ = [
    "HELD_OUT_GROUP",
    "OTHER_GROUP",
    "SEED_SCENARIOS",
    "SHIPPED_GROUP",
    "Trial",
    "action_counts",
    "default_scenarios",
    "evaluate",
    "evaluation_exit_code",
    "kind_counts",
    "per_episode",
    "ready_unspoken",
    "scenario_group",
]

SEED_SCENARIOS = ("person-robot", "person-object", "person-environment", "person-person")
SHIPPED_GROUP, HELD_OUT_GROUP, OTHER_GROUP = "shipped", "held-out", "other"
CRITIC = CriticCheck.name


def default_scenarios(folder: Path) -> list[Path]:
    """The seed's four in ``folder`` (a robot's scenarios folder), then its held-out ones."""
    seed = [folder / f"{name}.toml" for name in SEED_SCENARIOS]
    return seed + sorted((folder / HELD_OUT).glob("*.toml"))


def scenario_group(path: Path, folder: Path) -> str:
    """``held-out`` in ``folder/heldout``, ``shipped`` in ``folder``, else ``other``."""
    parent = path.resolve().parent
    if parent == (folder / HELD_OUT).resolve():
        return HELD_OUT_GROUP
    return SHIPPED_GROUP if parent == folder.resolve() else OTHER_GROUP


@dataclass(frozen=True)
class Trial:
    kind: JudgementKind
    reason: str
    actions: list[tuple[float, str]]
    phrase: str | None
    code: ExitCode = ExitCode.SUCCESS
    #: proposals each check refused (the critic's are its vetoes), and fallbacks run
    refused: dict[str, int] = field(default_factory=dict)
    fallbacks: int = 0
    #: the scenario's person is ok-to-engage or ready at some moment (speaking could succeed)
    ready_window: bool = False

    @property
    def success(self) -> bool:
        return self.kind is JudgementKind.SUCCESS

    @property
    def vetoes(self) -> int:
        """Proposals the critic refused."""
        return self.refused.get(CRITIC, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "kind": self.kind.value,
            "reason": self.reason,
            "actions": [{"t": round(t, 3), "action": a} for t, a in self.actions],
            "phrase": self.phrase,
            "refused": dict(self.refused),
            "fallbacks": self.fallbacks,
        }


def evaluate(
    robot: RobotConfig,
    skill: Skill,
    scenarios: list[Scenario],
    ask: Ask,
    mapper: ActionMapper,
    trials: int,
    options: EpisodeOptions,
    record_dir: Path | None = None,
) -> dict[str, list[Trial]]:
    """Every scenario ``trials`` times; a stop signal ends the evaluation after its episode."""
    results: dict[str, list[Trial]] = {}
    for scenario in scenarios:
        runs = results.setdefault(scenario.name, [])
        for index in range(trials):
            name = f"{safe_name(scenario.name)}-{index:02d}.jsonl"
            path = inside(record_dir, record_dir / name) if record_dir else None
            with Recorder(path) if path else MemoryRecorder() as recorder:
                outcome = run_episode(robot, skill, scenario, ask, mapper, recorder, options)
            verdict = judge(outcome, scenario)
            code = episode_exit_code(outcome, verdict.success)
            runs.append(
                Trial(
                    verdict.kind,
                    verdict.reason,
                    list(outcome.actions),
                    outcome.phrase,
                    code,
                    dict(outcome.refused),
                    outcome.fallbacks,
                    any(label.state != "not-ready" for label in scenario.label),
                )
            )
            if outcome.signal is not None:
                return results
    return results


def evaluation_exit_code(results: dict[str, list[Trial]]) -> ExitCode:
    """Stopped by a signal, else LLM unreachable or incomplete if any episode was, else 0.

    Failed tasks are what the tables count, so they do not fail the evaluation.
    """
    codes = [t.code for runs in results.values() for t in runs]
    for worst in (ExitCode.SIGINT, ExitCode.SIGTERM, ExitCode.LLM_UNREACHABLE, ExitCode.INCOMPLETE):
        if worst in codes:
            return worst
    return ExitCode.SUCCESS


def action_counts(skill: Skill, runs: list[Trial]) -> dict[str, float]:
    counts: Counter[str] = Counter(a for trial in runs for _, a in trial.actions)
    return {name: counts[name] / max(1, len(runs)) for name in skill.actions}


def per_episode(runs: list[Trial]) -> dict[str, float]:
    """The critic's vetoes and the fallbacks, per episode."""
    n = max(1, len(runs))
    return {
        "vetoes": sum(t.vetoes for t in runs) / n,
        "fallbacks": sum(t.fallbacks for t in runs) / n,
    }


def kind_counts(runs: list[Trial]) -> dict[str, int]:
    """How many trials ended as each kind (every kind, zeros included)."""
    counts = Counter(trial.kind for trial in runs)
    return {kind.value: counts[kind] for kind in JudgementKind}


def ready_unspoken(runs: list[Trial]) -> int:
    """Trials that ended without speaking to a person who was ready at some moment: the
    other side of "spoke while not ready" (a robot kept mute by its critic lands here)."""
    silent = (JudgementKind.NEVER_SPOKE, JudgementKind.STOPPED)
    return sum(t.ready_window and t.kind in silent for t in runs)
