"""Helpers shared by the benchmark scripts: paths, the robot and skill, statistics, output."""

from __future__ import annotations

import json
import math
import os
import platform
import random
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onboard.config import RobotConfig, load_robot
from onboard.hri.evaluate import SEED_SCENARIOS
from onboard.hri.person import PersonObservation
from onboard.hri.scenario import load_scenario
from onboard.hri.session import load_robot_skill
from onboard.llm.client import Message
from onboard.llm.prompts import first_stage
from onboard.loop.skill import Skill

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DEV_SET = ROOT.parent / "shared" / "eval" / "engage-mapping-dev.jsonl"
#: the second development set, written in this repository from the action texts
DEV2_SET = ROOT / "bench" / "data" / "engage-mapping-dev2.jsonl"
HELDOUT_SET = ROOT / "bench" / "data" / "engage-mapping-heldout.jsonl"
#: written apart from everything else, by a writer who saw only the action texts (BRIEF.md)
HELDOUT_V2 = ROOT / "bench" / "data" / "heldout-v2"
HELDOUT_V2_SET = HELDOUT_V2 / "engage-mapping.jsonl"
#: a second outside writer's development set (its BRIEF.md beside it): for tuning
DEV3_SET = ROOT / "bench" / "data" / "dev3" / "engage-mapping-dev3.jsonl"
DEV4_SET = ROOT / "bench" / "data" / "dev4" / "engage-mapping-dev4.jsonl"
#: the third held-out set, written like v2 once v2 had been scored six times and tuned after
HELDOUT_V3_SET = ROOT / "bench" / "data" / "heldout-v3" / "engage-mapping.jsonl"
#: the fourth, written like v3 once v3 had been scored three times with the mapper tuned (on the
#: development sets) between: committed before the next mapper change
HELDOUT_V4_SET = ROOT / "bench" / "data" / "heldout-v4" / "engage-mapping.jsonl"


def robot_and_skill(name: str = "engage") -> tuple[RobotConfig, Skill]:
    robot = load_robot(ROOT / "robot.toml")
    return robot, load_robot_skill(robot, name)


# activities beyond the scenarios', so every class of the stand-in policy's table occurs
EXTRA_ACTIVITIES = (
    "The person is reading a newspaper.",
    "The person is eating a sandwich.",
    "The person is typing on a laptop.",
    "The person is heading toward the exit.",
    "The person ended the conversation and turned around.",
    "The person is standing near the entrance.",
    "The person is looking at a map on the wall.",
)


def first_stage_prompts(
    robot: RobotConfig, skill: Skill, n: int, seed: int = 0
) -> list[list[Message]]:
    """``n`` first-stage prompts for varied situations, written as SkillRunner writes them.

    U is the goal plus the current action's text (filled with what was seen when the action
    began); X is perception's description of the person now (sometimes out of sight).
    """
    scenarios = [
        load_scenario(robot.skills_dir / "scenarios" / f"{n}.toml") for n in SEED_SCENARIOS
    ]
    activities = [a.text for s in scenarios for a in s.activity] + list(EXTRA_ACTIVITIES)
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        action = rng.choice(list(skill.actions.values()))
        began = PersonObservation(t=0.0, activity=rng.choice(activities), toward=rng.random() < 0.3)
        activity = began.activity if rng.random() < 0.5 else rng.choice(activities)
        now = PersonObservation(t=1.0, activity=activity, toward=rng.random() < 0.4)
        if rng.random() < 0.1:
            now = PersonObservation(t=1.0, activity=None, toward=None, visible=False)
        observed = {  # as SkillRunner._observed_fields
            "X_a": began.activity or "nothing visible",
            "X_g": "looking at the robot" if began.toward else "not looking at the robot",
        }
        situation = f"{skill.goal} {action.describe(observed)}"
        prompts.append(first_stage(skill, situation, now.situation()))
    return prompts


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def summary(seconds: Sequence[float]) -> dict[str, float | int]:
    """p50, p99 and max in milliseconds (linear interpolation, as numpy's default)."""
    if not seconds:
        return {"n": 0}
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    p50, p99 = np.percentile(ms, [50, 99])
    return {"n": len(ms), "p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(ms.max())}


def fmt_ms(stats: dict[str, Any], keys: Sequence[str] = ("p50_ms", "p99_ms", "max_ms")) -> str:
    if not stats.get("n"):
        return "n/a"
    return " / ".join(f"{stats[k]:.2f}" for k in keys) + " ms"


def pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100.0 * part / whole:.1f}%)" if whole else "n/a"


def verdict(ok: bool | None) -> str:
    if ok is None:
        return "n/a"
    return "[green]met[/green]" if ok else "[red]missed[/red]"


def rss_mb(pid: int | str = "self") -> float | None:
    """Resident set size from /proc/PID/status (VmRSS), in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (psutil when installed, else a scan of /proc)."""
    try:
        import psutil
    except ImportError:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                # the command name in (...) may hold spaces: the ppid follows the last ")"
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
        return found
    return [p.pid for p in psutil.Process(pid).children()]


def environment() -> dict[str, Any]:
    import httpx
    import onnxruntime

    return {
        "source": source_state(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "httpx": httpx.__version__,
        "onnxruntime": onnxruntime.__version__,
    }


def source_state() -> dict[str, Any]:
    """The commit measured and the files changed on top of it (read-only git queries)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--untracked-files=no").splitlines()
    return {"commit": git("rev-parse", "HEAD").strip(), "modified": [ln[3:] for ln in changed]}


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def yes_probability(
    url: str, messages: list[dict[str, str]], schema: dict[str, object]
) -> float | None:
    """P(yes) / (P(yes) + P(no)) at the answer token, from llama-cpp-python's top_logprobs
    (the model's distribution before the grammar masks it); None without logprobs."""
    import httpx

    body = {
        "messages": messages,
        "temperature": 0.0,
        "max_tokens": 20,
        "response_format": {"type": "json_object", "schema": schema},
        "logprobs": True,
        "top_logprobs": 10,
    }
    choice = httpx.post(f"{url}/chat/completions", json=body, timeout=60.0).json()["choices"][0]
    for token in (choice.get("logprobs") or {}).get("content") or []:
        if token["token"].strip(' "').lower() in ("yes", "no"):
            mass = {"yes": 0.0, "no": 0.0}
            for alt in token["top_logprobs"]:
                word = alt["token"].strip(' "').lower()
                if word in mass:
                    mass[word] += math.exp(alt["logprob"])
            return mass["yes"] / (mass["yes"] + mass["no"])
    return None


#: the episodes the recording benches write again, one of each kind (the stand-in, virtual)
RECORDED_EPISODES = {
    "person": ["run", "engage", "--llm", "standin", "--clock", "virtual"],
    "scene": ["run", "tidy", "--goal", "put the red block on the blue block", "--llm",
              "standin", "--clock", "virtual"],
    "code": ["code", "do", "--task", "1", "--llm", "standin"],
}  # fmt: skip


def recorded_episodes(folder: Path) -> Iterator[tuple[str, Path, list[Any]]]:
    """Each of :data:`RECORDED_EPISODES` run and recorded in ``folder``: its name, the
    recording, and its records read back with their images."""
    from onboard.cli.main import main as onboard
    from onboard.loop.recorder import read_recording

    for name, args in RECORDED_EPISODES.items():
        source = folder / f"{name}.jsonl"
        code = onboard(["--robot", str(ROOT / "robot.toml"), *args, "--record", str(source)])
        assert code == 0, f"{name}: exit {code}"
        yield name, source, list(read_recording(source, images=True))
