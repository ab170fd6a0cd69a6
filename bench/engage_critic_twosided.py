"""The Engage critic judged on both sides (issue 27, item 4), every row in one run.

    python bench/engage_critic_twosided.py [--trials 10] [--rows standin,random-critic,...]
        [--groups shipped,held-out] [--scenarios NAME=DIR ...] [--out NAME]

Each row is one ``onboard eval engage --json`` per group of scenarios (a subprocess, so the
figures are the CLI's own); this script only counts them two ways:

- **spoke while not ready**: episodes the judge failed for speaking inside a not-ready label,
  and on how many *busy* scenarios (any not-ready label) it happened at least once;
- **ready, never spoken to**: episodes that ended without speaking on a scenario whose person
  is ok-to-engage or ready at some moment (the critic's other failure: a mute robot).

Rows (``--rows``): ``standin`` and ``standin-critic`` (the rule stand-in without and with the
skill's critic), ``random`` and ``random-critic`` (the random proposer, a control: no planner),
``random-randcritic`` (the random proposer behind a critic of the same shape with random
weights, the other control), ``smollm2`` and ``smollm2-critic`` (the bundled model; slow, run
with ``--local-trials``). ``--onboard`` runs another checkout's CLI (a "before" measurement).
Prints a markdown table and writes bench/results/NAME.json (default engage_critic_twosided).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import ROOT, environment, write_results

from onboard.hri.scenario import HELD_OUT, Scenario, load_scenario

SCENARIOS = ROOT / "skills" / "scenarios"
SHIPPED = ("person-robot", "person-object", "person-environment", "person-person")
ROWS = {
    "standin": ["--critic", "none"],
    "standin-critic": [],
    "random": ["--llm", "random", "--critic", "none"],
    "random-critic": ["--llm", "random"],
    "random-randcritic": ["--llm", "random", "--critic", "{random_critic}"],
    "smollm2": ["--llm", "local", "--critic", "none"],
    "smollm2-critic": ["--llm", "local"],
}
DEFAULT_ROWS = "standin,standin-critic,random,random-critic,random-randcritic"


def group_files(name: str, extra: dict[str, Path]) -> list[Path]:
    if name == "shipped":
        return [SCENARIOS / f"{s}.toml" for s in SHIPPED]
    if name == "held-out":
        return sorted((SCENARIOS / HELD_OUT).glob("*.toml"))
    return sorted(extra[name].glob("*.toml"))


def busy(s: Scenario) -> bool:
    return any(label.state == "not-ready" for label in s.label)


def has_ready(s: Scenario) -> bool:
    return any(label.state != "not-ready" for label in s.label)


def count(report: dict[str, Any], scenarios: dict[str, Scenario]) -> dict[str, Any]:
    """The two sides of one ``--json`` report."""
    trials = success = not_ready = ready_unspoken = other = 0
    busy_hit, busy_all, vetoes, fallbacks = [], [], 0.0, 0.0
    for row in report["scenarios"]:
        s, kinds, n = scenarios[row["name"]], row["kinds"], len(row["trials"])
        trials += n
        success += kinds["success"]
        not_ready += kinds["spoke_not_ready"]
        other += kinds["spoke_out_of_sight"] + kinds["spoke_unlabelled"]
        if has_ready(s):
            ready_unspoken += kinds["never_spoke"] + kinds["stopped"]
        if busy(s):
            busy_all.append(s.name)
            if kinds["spoke_not_ready"]:
                busy_hit.append(s.name)
        vetoes += row["per_episode"]["vetoes"] * n
        fallbacks += row["per_episode"]["fallbacks"] * n
    return {
        "trials": trials,
        "success": success,
        "spoke_not_ready": not_ready,
        "busy_scenarios": len(busy_all),
        "busy_scenarios_spoken_to": busy_hit,
        "ready_never_spoken_to": ready_unspoken,
        "spoke_out_of_sight_or_unlabelled": other,
        "vetoes_per_episode": vetoes / max(1, trials),
        "fallbacks_per_episode": fallbacks / max(1, trials),
    }


def random_critic_file(cwd: Path) -> Path:
    from onboard.collab.controls import random_critic

    out = ROOT / "build" / "engage-random-critic.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    return random_critic(cwd / "models" / "critics" / "engage" / "all.onnx", out, seed=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=DEFAULT_ROWS, help=f"of {', '.join(ROWS)}")
    parser.add_argument("--groups", default="shipped,held-out")
    parser.add_argument("--scenarios", action="append", default=[], metavar="NAME=DIR",
                        help="another group: every *.toml in DIR")  # fmt: skip
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--local-trials", type=int, default=1, help="trials of the smollm2 rows")
    parser.add_argument("--onboard", default=str(Path(sys.executable).with_name("onboard")),
                        help="the CLI to measure (default: this checkout's)")  # fmt: skip
    parser.add_argument("--cwd", type=Path, default=ROOT, help="where the CLI runs")
    parser.add_argument("--skill", default="engage", help="the skill (a name or a file)")
    parser.add_argument("--out", default="engage_critic_twosided")
    args = parser.parse_args()
    extra = {k: Path(v).resolve() for k, _, v in (s.partition("=") for s in args.scenarios)}
    random_critic = None
    rows = []
    began = time.monotonic()
    for row in args.rows.split(","):
        flags = list(ROWS[row])
        if "{random_critic}" in flags:
            random_critic = random_critic or random_critic_file(args.cwd)
            flags = [str(random_critic) if f == "{random_critic}" else f for f in flags]
        trials = args.local_trials if row.startswith("smollm2") else args.trials
        groups = {g: group_files(g, extra) for g in args.groups.split(",")}
        files = [f for members in groups.values() for f in members]
        scenarios = {s.name: s for s in map(load_scenario, files)}
        # one evaluation a row, every group in it: the stand-in's noise is one seeded stream
        # over the episodes, so a row split otherwise would draw other numbers
        named = [a for f in files for a in ("--scenario", str(f))]
        command = [*shlex.split(args.onboard), "eval", args.skill, "--trials", str(trials),
                   *named, *flags, "--json"]  # fmt: skip
        print(f"{time.monotonic() - began:6.0f} s  {row}", file=sys.stderr)
        done = subprocess.run(command, cwd=args.cwd, capture_output=True, text=True,
                              check=False)  # fmt: skip
        try:  # an episode the LLM could not finish (exit 3 or 4) is still in the report
            report = json.loads(done.stdout)
        except json.JSONDecodeError:
            raise SystemExit(f"{row}: exit {done.returncode}\n{done.stderr[-2000:]}") from None
        for group, members in groups.items():
            names = {load_scenario(f).name for f in members}
            part = {**report, "scenarios": [r for r in report["scenarios"] if r["name"] in names]}
            rows.append({"row": row, "group": group, "critic": report["critic"],
                         "exit_code": done.returncode, **count(part, scenarios)})  # fmt: skip
    print("| row | group | successes | spoke while not ready (busy scenarios) |"
          " ready, never spoken to | vetoes / episode | fallbacks / episode |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['row']} | {r['group']} | {r['success']}/{r['trials']} |"
              f" {r['spoke_not_ready']} ({len(r['busy_scenarios_spoken_to'])} of"
              f" {r['busy_scenarios']}) | {r['ready_never_spoken_to']} |"
              f" {r['vetoes_per_episode']:.1f} | {r['fallbacks_per_episode']:.1f} |")  # fmt: skip
    meta = {"date": datetime.date.today().isoformat(), "command": sys.argv,
            "trials": args.trials, "local_trials": args.local_trials,
            "wall_seconds": round(time.monotonic() - began, 1),
            "machine": environment()}  # fmt: skip
    print(f"wrote {write_results(args.out, {**meta, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
