"""Choose the Engage critic's threshold (``[critic] epsilon``) on the training scenarios only.

Runs the random proposer behind the critic on ``bench/data/engage-train/scenarios`` for each
threshold of a grid and prints a table (and JSON with ``--json``): successes, speaking while
not ready, never speaking, vetoes and fallbacks per episode. The chosen threshold is the one
with the most successes (the fewest vetoes among equals); the evaluation scenarios (shipped and
held-out) are never run here.

    python models/critics/engage_epsilon.py [--trials 10] [--json build/engage-epsilon.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from onboard.catalog import load_robot_skill
from onboard.config import load_robot
from onboard.hri.evaluate import evaluate, kind_counts, per_episode
from onboard.hri.scenario import load_scenario
from onboard.hri.session import EpisodeOptions, make_mapper
from onboard.testing.random_ask import RandomAsk

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "bench/data/engage-train/scenarios"
GRID = (-0.2, -0.1, 0.0, 0.05, 0.1, 0.15, 0.2, 0.3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    robot = load_robot(ROOT / "robot.toml")
    skill = load_robot_skill(robot, "engage")
    if skill.critic is None:
        raise SystemExit(f"{skill.path}: no [critic] to tune")
    scenarios = [load_scenario(p) for p in sorted(TRAINING.glob("*.toml"))]
    mapper = make_mapper(robot, skill)
    options = EpisodeOptions(constrained=True, latency=robot.eval.standin_latency,
                             keep_candidates=False)  # fmt: skip
    rows = []
    for epsilon in GRID:
        spec = skill.critic.model_copy(update={"epsilon": epsilon})
        tuned = dataclasses.replace(skill, critic=spec)
        results = evaluate(robot, tuned, scenarios, RandomAsk(args.seed), mapper, args.trials,
                           options)  # fmt: skip
        runs = [t for trials in results.values() for t in trials]
        kinds = kind_counts(runs)
        rows.append({"epsilon": epsilon, "episodes": len(runs), **kinds, **per_episode(runs)})
    best = max(rows, key=lambda r: (r["success"], -r["vetoes"]))
    table = Table(title=f"Engage critic threshold on {len(scenarios)} training scenarios,"
                        f" {args.trials} random-proposer trials each")  # fmt: skip
    columns = ("epsilon", "success", "spoke not ready", "never spoke", "vetoes/ep", "fallbacks/ep")
    for name in columns:
        table.add_column(name, justify="right")
    for r in rows:
        mark = " *" if r is best else ""
        table.add_row(f"{r['epsilon']:+.2f}{mark}", f"{r['success']}/{r['episodes']}",
                      str(r["spoke_not_ready"]), str(r["never_spoke"]), f"{r['vetoes']:.2f}",
                      f"{r['fallbacks']:.2f}")  # fmt: skip
    Console().print(table)
    print(f"chosen: epsilon = {best['epsilon']} (skill {skill.path}: [critic] epsilon)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "chosen": best["epsilon"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
