"""The team stand-in LLM, a real server in its own process, driving the real simulators
through its replies: the prompt is built here with the shared contract's section headers
(a minimal builder; the loops' own is onboard.collab.prompts)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest

from onboard.collab.envs import TeamEnv, make_env
from onboard.collab.taskfile import TeamTask, load_team_task
from onboard.testing.team_standin import start_team_standin

ROOT = Path(__file__).resolve().parent.parent
TASKS = {n: load_team_task(ROOT / "tasks" / f"{n}.toml")
         for n in ("sweep_floor", "make_sandwich", "sort_cubes")}  # fmt: skip
HARDEST = {"sweep_floor": "Y3_G3", "make_sandwich": "recipe4", "sort_cubes": "level5"}
SEEDS = range(20)


def build_prompt(
    task: TeamTask,
    env: TeamEnv,  # type: ignore[type-arg]
    asked: Sequence[str],
    chosen: Mapping[str, str] | None = None,
    refused: Sequence[str] = (),
    feedback: Sequence[str] = (),
) -> str:
    """The user message, section by section, as the shared contract (section 4) lays out."""
    actions = ", ".join(env.vocabulary[1:])
    parts = [
        "## Task", task.description,
        "## Agents", *(f"{a.name}: {a.role}. Can reach: {', '.join(a.reach)}."
                       for a in task.agents),
        "## State", env.describe(),
        "## Actions", *(f"{a}: {actions}" for a in env.agents),
    ]  # fmt: skip
    if chosen:
        parts += ["## Chosen this step", *(f"{a}: {x}" for a, x in chosen.items())]
    if refused:
        parts += ["## Refused this step", *refused]
    if feedback:
        parts += ["## Feedback", *feedback]
    if len(asked) == 1:
        parts += ["## Reply", f"Plan the next action for {asked[0]} only. Reply exactly as:",
                  f"NAME {asked[0]} ACTION <action>"]  # fmt: skip
    else:
        parts += ["## Reply", f"Plan one action for each of {', '.join(asked)}. Reply exactly as:",
                  "EXECUTE", *(f"NAME {a} ACTION <action>" for a in asked)]  # fmt: skip
    return "\n".join(parts)


def ask(
    client: httpx.Client, prompt: str, schema: Mapping[str, object] | None = None
) -> tuple[int, str]:
    body: dict[str, object] = {
        "model": "team-standin",
        "messages": [{"role": "system", "content": "You plan for robots."},
                     {"role": "user", "content": prompt}],
    }  # fmt: skip
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "plan", "schema": schema}}  # fmt: skip
    response = client.post("/chat/completions", json=body)
    if response.status_code != 200:
        return response.status_code, response.json()["error"]["message"]
    return 200, response.json()["choices"][0]["message"]["content"]


def read_lines(text: str) -> dict[str, str]:
    return dict(re.findall(r"^NAME (\w+) ACTION (.+?)\s*$", text, re.MULTILINE))


def schema_of(env: TeamEnv, agents: Sequence[str]) -> dict[str, object]:  # type: ignore[type-arg]
    enum = list(env.vocabulary[1:])
    return {"type": "object", "properties": {a: {"enum": enum} for a in agents},
            "required": list(agents)}  # fmt: skip


def episode(client: httpx.Client, name: str, level: str, seed: int, joint: bool = False) -> TeamEnv:  # type: ignore[type-arg]
    """One episode planned by the stand-in alone: per agent in order (or one joint JSON
    request), last step's physical feedback in ``## Feedback``; no oracle call."""
    task = TASKS[name]
    env = make_env(task, level)
    env.reset(seed)
    feedback: list[str] = []
    while not env.done:
        if joint:
            status, text = ask(client, build_prompt(task, env, env.agents, feedback=feedback),
                               schema_of(env, env.agents))  # fmt: skip
            assert status == 200, text
            chosen = json.loads(text)
        else:
            chosen = {}
            for agent in env.agents:
                status, text = ask(client, build_prompt(task, env, [agent], chosen, (), feedback))
                assert status == 200, text
                chosen[agent] = read_lines(text)[agent]
        result = env.step(chosen)
        feedback = [f"{a}: {f}" for a, f in result.feedback.items() if f]
    return env


@pytest.fixture(scope="module")
def perfect() -> Iterator[httpx.Client]:
    url, stop = start_team_standin(seed=0, competence=1.0)
    try:
        with httpx.Client(base_url=url, timeout=10.0) as client:
            yield client
    finally:
        stop()


@pytest.mark.parametrize("name", list(HARDEST))
def test_competence_one_solves_the_hardest_level_in_every_seed(
    perfect: httpx.Client, name: str
) -> None:
    for seed in SEEDS:
        env = episode(perfect, name, HARDEST[name], seed)
        assert env.success, (seed, env.describe())


@pytest.mark.parametrize("name", list(HARDEST))
def test_competence_one_answers_joint_json_requests(perfect: httpx.Client, name: str) -> None:
    for seed in range(5):
        env = episode(perfect, name, HARDEST[name], seed, joint=True)
        assert env.success, (seed, env.describe())


def test_competence_zero_rarely_solves() -> None:
    url, stop = start_team_standin(seed=1, competence=0.0)
    try:
        with httpx.Client(base_url=url, timeout=10.0) as client:
            for name, level in HARDEST.items():
                solved = sum(episode(client, name, level, seed).success for seed in range(10))
                assert solved <= 1, (name, solved)
    finally:
        stop()


def test_a_refused_action_is_not_proposed_again_unless_feedback_is_ignored() -> None:
    task = TASKS["sweep_floor"]
    env = make_env(task, "Y2_G2")
    env.reset(0)
    useful = "MOVE yellow_cube1"
    lines = {
        "score": f"Alice: {useful} -> score -0.31 (under the threshold 0.00)",
        "infeasible": f"Alice: {useful} -> infeasible: Alice cannot reach yellow_cube1",
    }
    feedback = {
        "physical": f"Alice: {useful} failed: the arm is blocked",
        "reflection": f"Reflection: Alice chose {useful} and it was wrong",
        "dialogue": f"[Bob] Alice, {useful} is not possible right now",
    }
    replies: dict[bool, dict[str, str]] = {}
    for ignore in (False, True):
        url, stop = start_team_standin(seed=0, competence=1.0, ignore_feedback=ignore)
        try:
            with httpx.Client(base_url=url, timeout=10.0) as client:
                got = {}
                _, got["none"] = ask(client, build_prompt(task, env, ["Alice"]))
                for kind, line in lines.items():
                    _, got[kind] = ask(client, build_prompt(task, env, ["Alice"], refused=[line]))
                for kind, line in feedback.items():
                    _, got[kind] = ask(client, build_prompt(task, env, ["Alice"], feedback=[line]))
                praise = f"Alice: {useful} -> score 0.40 (accepted)"
                _, got["praise"] = ask(
                    client, build_prompt(task, env, ["Alice"], feedback=[praise])
                )
                replies[ignore] = {k: read_lines(v)["Alice"] for k, v in got.items()}
        finally:
            stop()
    assert replies[False]["none"] == useful == replies[False]["praise"]
    for kind in (*lines, *feedback):
        assert replies[False][kind] != useful, kind
        assert replies[True][kind] == useful, kind  # the control row reads no feedback


def test_a_refused_joint_action_bans_the_combination_not_one_agents_action() -> None:
    """FEEDBACK.md version 2: a refused joint line is not proposed again, and nothing more;
    the agent that would complete it (the last asked) changes, the others keep theirs."""
    task = TASKS["sweep_floor"]
    env = make_env(task, "Y2_G2")
    env.reset(0)
    agents = list(env.agents)
    replies: dict[bool, list[dict[str, str]]] = {}
    for ignore in (False, True):
        url, stop = start_team_standin(seed=0, competence=1.0, ignore_feedback=ignore)
        try:
            with httpx.Client(base_url=url, timeout=10.0) as client:
                _, first = ask(client, build_prompt(task, env, agents))
                joint = read_lines(first)
                refused = ", ".join(f"{a}: {joint[a]}" for a in agents)
                line = f"{refused} -> score -0.31 (under the threshold 0.00)"
                _, again = ask(client, build_prompt(task, env, agents, refused=[line]))
                replies[ignore] = [joint, read_lines(again)]
        finally:
            stop()
    (joint, again), (_, control) = replies[False], replies[True]
    assert again[agents[0]] == joint[agents[0]]
    assert again[agents[1]] != joint[agents[1]]
    assert control == joint  # the control row reads no feedback


def test_a_request_it_cannot_read_gets_a_400_with_the_reason(perfect: httpx.Client) -> None:
    """Every refusal says it is the stand-in's (a user's own task meets it: docs/team-envs.md)."""
    status, text = ask(perfect, "## Task\nsweep the floor\n## Reply\nfor Bob only.")
    assert (status, text) == (400, "team stand-in: the user message has no '## State' section")
    env = make_env(TASKS["sort_cubes"], "level1")
    env.reset(0)
    prompt = build_prompt(TASKS["sort_cubes"], env, ["Alice"])
    status, text = ask(perfect, prompt.replace("## Reply", "## Replied"))
    assert (status, text) == (400, "team stand-in: the '## Reply' section names no agent to plan"
                                   " for")  # fmt: skip
    task = prompt.split("## Agents")[0]
    status, text = ask(perfect, prompt.replace(task, "## Task\nStack the blocks into a tower.\n"))
    assert (status, text) == (400, "team stand-in: the '## Task' is none of its tasks (sweep,"
                                   " sandwich, sort, overcooked)")  # fmt: skip


def test_the_stand_in_imports_no_simulator(tmp_path: Path) -> None:
    err = tmp_path / "importtime.txt"
    python = (sys.executable, "-X", "importtime")
    url, stop = start_team_standin(seed=0, competence=1.0, python=python, stderr=err)
    try:
        with httpx.Client(base_url=url, timeout=10.0) as client:
            env = episode(client, "make_sandwich", "recipe1", 0)  # it has planned a whole task
            assert env.success
    finally:
        stop()
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in err.read_text(encoding="utf-8").splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "onboard.testing.team_standin.server" in imported  # the log is the real one
    # of the team code only the kitchen's pure rules (and their package, which holds no code)
    collab = {m for m in imported if m == "onboard.collab" or m.startswith("onboard.collab.")}
    assert collab <= {"onboard.collab", "onboard.collab.kitchen"}


def test_the_same_seed_gives_the_same_replies() -> None:
    def run() -> list[str]:
        url, stop = start_team_standin(seed=5, competence=0.5)
        try:
            with httpx.Client(base_url=url, timeout=10.0) as client:
                env = episode(client, "sort_cubes", "level3", 2)
                return [env.describe(), str(env.steps)]
        finally:
            stop()

    assert run() == run()


def test_the_command_refuses_a_bad_competence() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "onboard.testing.team_standin", "--competence", "2"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == "team stand-in: competence 2.0: not between 0 and 1"


def test_a_tie_between_equally_long_actions_goes_to_the_first_in_the_line() -> None:
    """``Alice tried DUMP and WAIT`` names DUMP (both four letters), in every process: the
    ban once followed a set's order, which changes with the hash seed, so two evaluations
    with the same seed could differ."""
    code = (
        "from onboard.testing.team_standin.reading import Prompt, bans\n"
        "p = Prompt({'Feedback': 'Alice tried DUMP and WAIT: both failed'}, "
        "['Alice', 'Bob'], {}, {'Alice': [], 'Bob': []}, {}, False)\n"
        "print(sorted(bans(p, ['WAIT', 'DUMP', 'MOVE cube']).single['Alice']))\n"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-P", "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3", "4")
    }  # fmt: skip
    assert seen == {"['DUMP']"}
