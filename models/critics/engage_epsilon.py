"""Choose the Engage critic's thresholds (``[critic] epsilon`` and ``ready``) on the training
scenarios only, by cross-validation over scenarios.

A critic scored on the scenarios it was trained on has seen their wordings; the evaluation's
people are worded otherwise. So the training scenarios are split into ``--folds`` groups (by
name, every family spread over the groups); for each group a critic is collected and trained
on the others (``onboard critic collect engage`` and ``onboard critic train``, the recipe of
build.py; needs the ``train`` extra) and judged on the group it never saw, behind the random
proposer and behind the stand-in. Each threshold pair of the grid is counted on both sides:
spoken to while not ready, and successes (a ready person spoken to). The chosen pair has no
speech to busy people (both proposers together) than the seed's ReAd-J rule at the shipped
threshold, then the most successes. With ``--gaze``, the issue's own two-sided bar: among the
settings whose successes are at least the seed's ReAd-J rule's minus 10 points of the
episodes (not mute), the fewest speeches to busy people, then the most successes. The
evaluation scenarios (shipped and held-out) are never run here.

    python models/critics/engage_epsilon.py [--folds 5] [--trials 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from onboard.catalog import load_robot_skill
from onboard.cli.endpoint import llm_endpoint
from onboard.config import RobotConfig, load_robot
from onboard.grounding.mapping import ActionMapper
from onboard.hri.evaluate import evaluate, kind_counts, per_episode
from onboard.hri.scenario import Scenario, load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, make_mapper
from onboard.llm.client import ChatClient
from onboard.loop.engine import Ask
from onboard.loop.skill import Skill
from onboard.testing.random_ask import RandomAsk

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models" / "critics"))
from build import SEED, SKILL_EPISODES, fold_of, onboard, run  # noqa: E402

TRAINING = ROOT / "bench/data/engage-train/scenarios"
FOLDS = ROOT / "build/engage-cv"
EPSILONS = (-0.1, 0.0, 0.1, 0.2, 0.3)
READY: tuple[float | None, ...] = (0.3, 0.5, 0.7, None)
#: the ensemble's score is its lowest member's: lower thresholds
ENSEMBLE_EPSILONS = (-0.4, -0.3, -0.2, -0.1, 0.0, 0.1)
PROPOSERS = ("random", "standin")
#: --gaze: the readiness rule with its members and the gaze bar: speech to a person not looking
#: at the robot (looking_away), a look held after a busy reading (look_held), eye contact to
#: draw a look (attend)
GAZE_EPSILONS = (-0.3, -0.1, 0.1)
GAZE_READY: tuple[float | None, ...] = (0.3, 0.5, None)
LOOKING_AWAY: tuple[float | str, ...] = (0.9, "never")
LOOK_HELD: tuple[float | None, ...] = (None, 1.5, 3.0)
#: a person still looking away this long after eye contact began did not answer it (the
#: simulated person free to talk looks back after notice_time, 0.5 s; eye contact lasts 1 s)
ANSWER_WITHIN: tuple[float | None, ...] = (None, 0.75)
ATTEND = "eye contact"
SETTING_COLUMNS = ("rule", "members", "epsilon", "ready", "looking away", "look held",
                   "answer within", "attend")  # fmt: skip


def build_fold(name: str, files: list[Path], reuse: bool) -> Path:
    """A critic collected and trained on ``files`` (the other folds), the build.py recipe."""
    where = FOLDS / name
    model = where / "critic.onnx"
    if reuse and model.is_file():
        return model
    scenarios = where / "scenarios"
    shutil.rmtree(scenarios, ignore_errors=True)
    scenarios.mkdir(parents=True)
    for f in files:
        (scenarios / f.name).symlink_to(f)
    data = where / "data.npz"
    run([onboard(), "critic", "collect", "engage", "--scenarios", str(scenarios), "--out",
         str(data), "--episodes", str(SKILL_EPISODES), "--seed", str(SEED)])  # fmt: skip
    run([onboard(), "critic", "train", "--data", str(data), "--out", str(model), "--task",
         "engage", "--level", "all", "--seed", str(SEED)])  # fmt: skip
    return model


def judged(
    robot: RobotConfig, skill: Skill, scenarios: list[Scenario], ask: Ask,
    mapper: ActionMapper, trials: int, options: EpisodeOptions,
) -> dict[str, Any]:  # fmt: skip
    results = evaluate(robot, skill, scenarios, ask, mapper, trials, options)
    runs = [t for trials_ in results.values() for t in trials_]
    ready = {s.name for s in scenarios if any(lb.state != "not-ready" for lb in s.label)}
    unspoken = sum(
        t.kind.value in ("never_spoke", "stopped") for name in ready for t in results[name]
    )
    return {"episodes": len(runs), **kind_counts(runs), **per_episode(runs),
            "ready_never_spoken_to": unspoken}  # fmt: skip


def _shown(value: float | str | None) -> str:
    return "" if value is None else value if isinstance(value, str) else f"{value:+.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reuse", action="store_true", help="keep build/engage-cv's models")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--gaze", action="store_true",
                        help="the grid of the gaze bar (looking_away, attend) instead")  # fmt: skip
    args = parser.parse_args()
    began = time.monotonic()
    robot = load_robot(ROOT / "robot.toml")
    skill = load_robot_skill(robot, "engage")
    if skill.critic is None:
        raise SystemExit(f"{skill.path}: no [critic] to tune")
    files = sorted(TRAINING.glob("*.toml"))
    fold = fold_of(files, args.folds)
    models = [build_fold(f"fold{k}", [f for f in files if fold[f] != k], args.reuse)
              for k in range(args.folds)]  # fmt: skip
    # the ensemble's other members, as shipped (one critic per fold of the training
    # scenarios) but nested: for fold k, a critic without fold j for each j != k
    members = [[build_fold(f"fold{k}/without{j}", [f for f in files if fold[f] not in (j, k)],
                           args.reuse) for j in range(args.folds) if j != k]
               for k in range(args.folds)]  # fmt: skip
    print(f"fold critics ready ({time.monotonic() - began:.0f} s)", file=sys.stderr)
    held = [[load_scenario(f) for f in files if fold[f] == k] for k in range(args.folds)]
    mapper = make_mapper(robot, skill)
    options = EpisodeOptions(constrained=True, latency=robot.eval.standin_latency,
                             keep_candidates=False)  # fmt: skip
    Row = tuple[
        str, float, float | None, bool, float | str | None, str | None, float | None, float | None
    ]
    grid: list[Row] = [("joint", 0.1, None, False, None, None, None, None)]
    if args.gaze:
        grid += [("readiness", -0.3, 0.3, True, None, None, None, None)]  # issue 27's first
        grid += [("readiness", e, r, True, a, ATTEND, h, w) for e in GAZE_EPSILONS
                 for r in GAZE_READY for a in LOOKING_AWAY for h in LOOK_HELD
                 for w in ANSWER_WITHIN]  # fmt: skip
    else:
        grid += [("readiness", e, r, False, None, None, None, None) for e in EPSILONS
                 for r in READY if r is None or r > e]  # fmt: skip
        grid += [("readiness", e, r, True, None, None, None, None) for e in ENSEMBLE_EPSILONS
                 for r in READY if r is None or r > e]  # fmt: skip
    rows = []
    with llm_endpoint(robot, "standin") as (url, _), ChatClient(robot.llm, base_url=url) as client:
        asks = {"random": lambda: RandomAsk(args.seed), "standin": lambda: HttpAsk(client)}
        for rule, epsilon, ready, ensemble, looking_away, attend, look_held, answer in grid:
            row: dict[str, Any] = {"rule": rule, "epsilon": epsilon, "ready": ready,
                                   "members": ensemble, "looking_away": looking_away,
                                   "attend": attend, "look_held": look_held,
                                   "answer_within": answer}  # fmt: skip
            for proposer in PROPOSERS:
                totals: dict[str, float] = {}
                for k in range(args.folds):
                    spec = skill.critic.model_copy(update={
                        "model": str(models[k]), "rule": rule, "epsilon": epsilon,
                        "ready": ready, "looking_away": looking_away, "attend": attend,
                        "look_held": look_held, "answer_within": answer,
                        "members": [str(m) for m in members[k]] if ensemble else []})  # fmt: skip
                    tuned = dataclasses.replace(skill, critic=spec)
                    counts = judged(robot, tuned, held[k], asks[proposer](), mapper,
                                    args.trials, options)  # fmt: skip
                    for key, value in counts.items():
                        weight = counts["episodes"] if key in ("vetoes", "fallbacks") else 1
                        totals[key] = totals.get(key, 0) + value * weight
                totals["vetoes"] /= totals["episodes"]
                totals["fallbacks"] /= totals["episodes"]
                row[proposer] = totals
            rows.append(row)
            print(f"{time.monotonic() - began:5.0f} s {rule} {epsilon:+.2f} {ready}"
                  f"{' members' if ensemble else ''} {looking_away} {attend} {look_held}"
                  f" {answer}",
                  file=sys.stderr)  # fmt: skip

    def busy(r: dict[str, Any]) -> float:
        return sum(r[p]["spoke_not_ready"] for p in PROPOSERS)

    # two-sided: no more speech to busy people than the seed's rule at its threshold (rows[0]),
    # then the most successes
    safe = [r for r in rows if busy(r) <= busy(rows[0])]
    if args.gaze:  # speaking to a busy person is the worst failure, never speaking a failure
        # too: not under the seed rule's successes by more than 10 points, then the fewest
        # speeches to busy people (the fewest alone once chose a mute robot: 168/800)
        episodes = sum(rows[0][p]["episodes"] for p in PROPOSERS)
        floor = sum(rows[0][p]["success"] for p in PROPOSERS) - 0.1 * episodes
        speaking = [r for r in rows if sum(r[p]["success"] for p in PROPOSERS) >= floor]
        safe = [r for r in speaking if busy(r) == min(map(busy, speaking))]
    best = max(safe, key=lambda r: (sum(r[p]["success"] for p in PROPOSERS), -busy(r)))
    table = Table(title=f"Engage critic thresholds, {args.folds}-fold cross-validation over"
                        f" {len(files)} training scenarios, {args.trials} trials each")  # fmt: skip
    for name in SETTING_COLUMNS:
        table.add_column(name, justify="right")
    for p in PROPOSERS:
        for name in ("success", "spoke not ready", "ready, unspoken", "vetoes/ep"):
            table.add_column(f"{p}\n{name}", justify="right")
    for r in rows:
        cells = [r["rule"] + (" *" if r is best else ""),
                 f"+{args.folds - 1}" if r["members"] else "", f"{r['epsilon']:+.2f}",
                 "none" if r["ready"] is None else f"{r['ready']:+.2f}",
                 _shown(r["looking_away"]), _shown(r["look_held"]),
                 _shown(r.get("answer_within")), r["attend"] or ""]  # fmt: skip
        for p in PROPOSERS:
            c = r[p]
            cells += [f"{int(c['success'])}/{int(c['episodes'])}", str(int(c["spoke_not_ready"])),
                      str(int(c["ready_never_spoken_to"])), f"{c['vetoes']:.1f}"]  # fmt: skip
        table.add_row(*cells)
    Console(width=200).print(table)
    print(f"chosen: rule = {best['rule']!r}, members = {best['members']}, epsilon ="
          f" {best['epsilon']}, ready = {best['ready']}, looking_away = {best['looking_away']!r},"
          f" look_held = {best['look_held']}, answer_within = {best['answer_within']},"
          f" attend = {best['attend']!r}"
          f" ({time.monotonic() - began:.0f} s)")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "chosen": best}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
