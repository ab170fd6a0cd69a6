"""Wall-clock Engage episodes against a faulty LLM endpoint, each replayed from its recording
(issue 28: every recording replays, whatever the clock and the faults).

Each episode runs `person-object` on the wall clock with the stand-in's place taken by the
hostile loopback endpoint (`onboard.testing.fault_server`): it answers ``ok``, then the fault,
``ok``, the fault again, then ``ok`` for the rest. The recording is then replayed as
`onboard replay` does and its action sequence compared with the recorded one; a divergence
is shown with what differs. Run it with a busy loop on one core to see a loaded controller.

    python bench/replay_wall_faults.py [--modes drip_body,hang,...] [--scenario person-object]

About 40 s of wall time an episode. Prints a table and writes
bench/results/replay_wall_faults.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, environment, write_results
from rich.console import Console
from rich.table import Table

from onboard import bundled
from onboard.base.errors import OnboardError
from onboard.catalog import load_robot_skill, make_mapper
from onboard.config import load_robot
from onboard.hri.replay import replay
from onboard.hri.scenario import load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.llm.client import ChatClient
from onboard.loop.recorder import Recorder
from onboard.testing.fault_server import FaultServer

MODES = ("drip_body", "hang", "late", "reset", "429", "503", "malformed", "huge")
KEY_ENV = "ONBOARD_BENCH_FAULT_KEY"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--scenario", default="person-object")
    args = parser.parse_args()
    os.environ.setdefault(KEY_ENV, "sk-bench-not-a-secret")
    robot = load_robot(ROOT / "robot.toml")
    llm = {"deadline": 2.0, "read_timeout": 5.0, "retries": 2, "api_key_env": KEY_ENV,
           "breaker_failures": 3, "breaker_cooldown": 8.0}  # fmt: skip
    robot = robot.model_copy(update={"llm": robot.llm.model_copy(update=llm)})
    skill = load_robot_skill(robot, "engage")
    mapper = make_mapper(robot, skill)
    scenario = load_scenario(bundled.skills_dir() / "scenarios" / f"{args.scenario}.toml")
    rows = []
    with tempfile.TemporaryDirectory(prefix="onboard-wall-faults-") as folder:
        for mode in args.modes.split(","):
            path = Path(folder) / f"{mode}.jsonl"
            began = time.perf_counter()
            with (
                FaultServer(
                    modes=["ok", mode, "ok", mode], after="ok", drip=0.05, late=3.0, retry_after="1"
                ) as server,  # fmt: skip
                ChatClient(robot.llm, base_url=server.base_url) as client,
                Recorder(path) as recorder,
            ):
                run_episode(robot, skill, scenario, HttpAsk(client), mapper, recorder,
                            EpisodeOptions(clock="wall"))  # fmt: skip
            seconds = time.perf_counter() - began
            try:
                recorded, replayed = replay(path)
                verdict = "reproduces" if recorded == replayed else "other actions"
                detail = "" if recorded == replayed else f"{recorded} / {replayed}"
            except OnboardError as exc:
                verdict, detail = "diverged", str(exc)
            rows.append({"mode": mode, "replay": verdict, "detail": detail,
                         "episode_seconds": round(seconds, 1)})  # fmt: skip
            print(f"{mode}: {verdict} ({seconds:.0f} s)", file=sys.stderr)
    table = Table(title=f"Wall-clock Engage ({args.scenario}) against a faulty endpoint, replayed")
    for name in ("fault", "replay", "episode (s)", "what differs"):
        table.add_column(name)
    for r in rows:
        table.add_row(r["mode"], r["replay"], f"{r['episode_seconds']:.0f}", r["detail"][:120])
    Console(width=160).print(table)
    same = sum(r["replay"] == "reproduces" for r in rows)
    print(f"{same} of {len(rows)} recordings replay")
    path = write_results("replay_wall_faults", {
        "command": ["bench/replay_wall_faults.py", *sys.argv[1:]],
        "scenario": args.scenario,
        "rows": rows,
        "reproduce": same,
        "machine": environment(),
    })  # fmt: skip
    print(f"wrote {path}")
    return 0 if same == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
