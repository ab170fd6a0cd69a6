"""Rebuild every shipped critic: ``python models/critics/build.py`` (or ``make critics``).

For each level of each task file in ``tasks/``: ``onboard critic collect`` (the team stand-in
at its default competence planning as Central Plan does, plus augmented episodes, plus
Monte Carlo probe states on held-out seeds) into ``build/critics-data/<task>/<level>.npz``
(not committed), then ``onboard critic train`` into ``models/critics/<task>/<level>.onnx``
and its card. The Engage skill's critic (issue 15) comes from ``onboard critic collect engage
--scenarios bench/data/engage-train/scenarios`` (a random behaviour policy on the training
scenarios) into ``models/critics/engage/all.onnx``. Every step is seeded: the same command
gives byte-identical datasets anywhere, and byte-identical models and cards on the same
machine (torch's CPU kernels round differently on another CPU; docs/papers/read.md).
Needs the ``train`` extra (torch). ``--jobs`` levels run at once (each its own stand-in).

At the end it writes ``models/critics/METRICS.md`` (the cards' figures, one row a level)
and prints the same table with the seconds each step took.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DATA = Path("build/critics-data")  # relative to ROOT: the cards name it so
TASKS = (
    "sweep_floor",
    "make_sandwich",
    "sort_cubes",
    "overcooked_cramped_room",
    "overcooked_forced_coordination",
)

#: person skills with a critic (issue 15): data from their training scenarios, one model each
SKILLS = {"engage": Path("bench/data/engage-train/scenarios")}
SKILL_LEVEL = "all"  # a skill's critic covers every scenario
SKILL_EPISODES = 20  # per training scenario
#: a skill critic's members (its [critic] members): one per fold of the training scenarios,
#: each trained without that fold, so where they disagree the state is unlike some of the data
SKILL_FOLDS = 5


def fold_of(files: list[Path], folds: int = SKILL_FOLDS) -> dict[Path, int]:
    """Each training scenario's fold: by name, in turn, so every family is in every fold."""
    return {f: k % folds for k, f in enumerate(sorted(files))}


def skill_scenarios(task: str, level: str) -> Path:
    """The scenarios a skill's critic at ``level`` trains on: all, or all but one fold (a
    folder of links under build/)."""
    everything = ROOT / SKILLS[task]
    if level == SKILL_LEVEL:
        return SKILLS[task]
    k = int(level.removeprefix("fold"))
    files = sorted(everything.glob("*.toml"))
    folder = DATA / task / f"{level}-scenarios"
    shutil.rmtree(ROOT / folder, ignore_errors=True)
    (ROOT / folder).mkdir(parents=True)
    for f, fold in fold_of(files).items():
        if fold != k:
            (ROOT / folder / f.name).symlink_to(f)
    return folder


#: the recipe, the same for every level
EPISODES = 800
AUGMENT = 0.5
PROBES = 24
ROLLOUTS = 10
SEED = 0
#: the stand-in's competence while collecting, where its default (0.6) is not used: on
#: Overcooked-AI the step limits (20, 25) leave 2 steps over the greedy plan's (18, 23), so
#: at 0.6 (and 0.8) no episode serves a soup, every return is 0 and a critic learns nothing;
#: at 0.95 Central Plan serves in 8 of 10 episodes on each layout
COLLECT_COMPETENCE = {"overcooked_cramped_room": 0.95, "overcooked_forced_coordination": 0.95}


@dataclass(frozen=True)
class Built:
    task: str
    level: str
    collect_seconds: float
    train_seconds: float


def onboard() -> str:
    found = shutil.which("onboard", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit(f"no onboard next to {sys.executable}: pip install -e '.[dev,train]'")
    return found


def build_level(task: str, level: str, reuse: bool) -> Built:
    data = DATA / task / f"{level}.npz"
    model = Path("models/critics") / task / f"{level}.onnx"
    began = time.perf_counter()
    if task in SKILLS:
        if not (reuse and (ROOT / data).is_file()):
            scenarios = str(skill_scenarios(task, level))
            run([onboard(), "critic", "collect", task, "--scenarios", scenarios, "--out",
                 str(data), "--episodes", str(SKILL_EPISODES), "--seed", str(SEED)])  # fmt: skip
    elif not (reuse and (ROOT / data).is_file()):
        run([onboard(), "critic", "collect", task, "--level", level, "--out", str(data),
             "--episodes", str(EPISODES), "--augment", str(AUGMENT), "--llm", "standin",
             "--probes", str(PROBES), "--rollouts", str(ROLLOUTS), "--seed", str(SEED),
             *(["--competence", str(COLLECT_COMPETENCE[task])] if task in COLLECT_COMPETENCE
               else [])])  # fmt: skip
    collected = time.perf_counter()
    run([onboard(), "critic", "train", "--data", str(data), "--out", str(model),
         "--task", task, "--level", SKILL_LEVEL if task in SKILLS else level,
         "--seed", str(SEED)])  # fmt: skip
    return Built(task, level, collected - began, time.perf_counter() - collected)


def run(command: list[str]) -> None:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(command[1:])}: exit {done.returncode}\n{done.stderr}")


def levels(only: list[str]) -> list[tuple[str, str]]:
    from onboard.collab.taskfile import load_team_task

    out = []
    for task in TASKS:
        loaded = load_team_task(ROOT / "tasks" / f"{task}.toml")
        for level in loaded.levels:
            if not only or task in only or f"{task}/{level}" in only:
                out.append((task, level))
    for skill in SKILLS:
        for level in (SKILL_LEVEL, *(f"fold{k}" for k in range(SKILL_FOLDS))):
            if not only or skill in only or f"{skill}/{level}" in only:
                out.append((skill, level))
    return out


def table(built: dict[tuple[str, str], Built] | None = None) -> list[str]:
    """The cards' figures, a row a level (with the seconds when ``built`` has them)."""
    from onboard.collab.card import load_card

    def f(value: float | None, digits: int = 3) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    head = ["task", "level", "episodes", "transitions", "held-out MSE", "mean predictor",
            "Spearman A_1", "Spearman A_joint", "useful>WAIT", "(MC)", "pairs", "KB"]  # fmt: skip
    if built:
        head += ["collect s", "train s"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for task in (*TASKS, *SKILLS):
        for model in sorted((HERE / task).glob("*.onnx")):
            card = load_card(model.with_suffix(".toml"))
            t, m = card.training, card.metrics
            level = model.stem if task in SKILLS else card.level  # a skill: all, its folds
            row = [task, level, f"{t.episodes}+{t.heldout_episodes}", str(t.transitions),
                   f(m.mse), f(m.mse_baseline), f(m.spearman_advantage),
                   f(m.spearman_joint), f(m.useful_over_wait), f(m.useful_over_wait_mc),
                   str(m.useful_pairs), f"{model.stat().st_size / 1024:.0f}"]  # fmt: skip
            if built:
                b = built.get((task, card.level))
                row += ["", ""] if b is None else [f"{b.collect_seconds:.0f}",
                                                   f"{b.train_seconds:.0f}"]  # fmt: skip
            rows.append("| " + " | ".join(row) + " |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="tasks or task/level to rebuild (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="levels built at once (default 2)")
    parser.add_argument("--reuse-data", action="store_true",
                        help="train on the datasets build/critics-data holds"
                             " (collect the rest)")  # fmt: skip
    args = parser.parse_args()
    todo = levels(args.only)
    built: dict[tuple[str, str], Built] = {}
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for done in pool.map(lambda tl: build_level(*tl, args.reuse_data), todo):
            built[(done.task, done.level)] = done
            print(f"built {done.task}/{done.level} (collect {done.collect_seconds:.0f} s,"
                  f" train {done.train_seconds:.0f} s)", flush=True)  # fmt: skip
    (HERE / "METRICS.md").write_text(
        "# Shipped critics: held-out figures from their cards\n\n"
        "Written by `python models/critics/build.py`; see README.md for what each column"
        " means.\n\n" + "\n".join(table()) + "\n",
        encoding="utf-8",
    )
    print("\n".join(table(built)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
