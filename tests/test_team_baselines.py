"""The baselines' loops (issue 14, item 7) and the disturbance (item 9), end to end: the real
team stand-in in its own process (it reads only the HTTP request), the real simulators of the
shipped task files, each episode recorded; the assertions read the recording.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from onboard.base.errors import UsageError
from onboard.collab.envs import make_env
from onboard.collab.episode import TeamOutcome, TeamSettings, run_team_episode, team_header
from onboard.collab.methods import TrialMemory, method
from onboard.collab.replay import replay_team_episode
from onboard.collab.taskfile import find_team_task, shipped_tasks_dir
from onboard.config import LLMConfig, RobotConfig
from onboard.llm.client import ChatClient
from onboard.loop.recorder import MemoryRecorder, Recorder
from onboard.testing.team_standin import start_team_standin

BASELINES = ("react", "reflexion", "mindagent", "roco", "roco_l", "roco_p")


@contextmanager
def standin(seed: int = 0, competence: float = 0.6) -> Iterator[ChatClient]:
    url, stop = start_team_standin(seed, competence)
    try:
        with ChatClient(LLMConfig(base_url=url), base_url=url) as client:
            yield client
    finally:
        stop()


@dataclass
class Run:
    outcome: TeamOutcome
    records: list[dict[str, Any]]

    def kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind]

    def requests(self) -> list[dict[str, Any]]:
        return self.kind("request")

    def steps(self) -> list[list[dict[str, Any]]]:
        """The records of each environment step, from its ``state`` record on."""
        out: list[list[dict[str, Any]]] = []
        for record in self.records:
            if record["kind"] == "state":
                out.append([])
            if out:
                out[-1].append(record)
        return out


def run(
    client: ChatClient,
    name: str,
    task_name: str = "make_sandwich",
    level: str = "recipe3",
    seed: int = 0,
    **options: Any,
) -> Run:
    task = find_team_task(task_name)
    settings = TeamSettings(task, level, **options.pop("settings", {}))
    recorder = MemoryRecorder()
    outcome = run_team_episode(
        make_env(task, level), method(name), client, None, settings, recorder, seed, **options
    )
    return Run(outcome, recorder.records)


def user(request: dict[str, Any]) -> str:
    return str(request["messages"][-1]["content"])


def section(text: str, header: str) -> str:
    found = re.search(rf"^## {re.escape(header)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return found.group(1).strip() if found else ""


def env_lines(step: dict[str, Any], agents: list[str]) -> list[str]:
    """The observation lines a step's env_step record should turn into."""
    lines = []
    for agent in agents:
        said = step["feedback"][agent]
        lines.append(f"{agent}: {said}" if said else f"{agent}: {step['joint'][agent]} done")
    return lines


def test_the_baselines_are_registered() -> None:
    for name in BASELINES:
        assert method(name).name == name and not method(name).critic
    with pytest.raises(UsageError, match=r"known: .*roco_p"):
        method("roco_x")


@pytest.mark.parametrize("name", ["react", "mindagent"])
def test_one_joint_request_a_step_with_the_last_steps_physical_feedback(name: str) -> None:
    with standin(competence=0.5) as client:
        result = run(client, name)
    agents = list(find_team_task("make_sandwich").agent_names)
    requests = result.requests()
    assert result.outcome.queries == len(requests) == result.outcome.steps
    assert {r["purpose"] for r in requests} == {"plan_joint"}
    env_steps = result.kind("env_step")
    failed = 0
    for number, request in enumerate(requests):
        text = user(request)
        feedback = section(text, "Feedback")
        if number == 0:
            assert feedback == "" and section(text, "History") == ""
            continue
        before = env_steps[number - 1]
        for line in env_lines(before, agents):
            assert line in feedback.splitlines()
        failed += any(before["feedback"].values())
        # every earlier step is in the history, with what the environment reported
        assert f"step {number - 1}: " in section(text, "History")
    assert failed, "the episode should have run an infeasible action to report"
    reply = section(user(requests[0]), "Reply")
    system = requests[0]["messages"][0]["content"]
    if name == "react":
        assert "Thought:" in reply and "Reason about the state" in system
    else:
        assert "Thought:" not in reply and "central dispatcher" in system


def test_reflexion_reflects_after_a_failed_trial_and_carries_it_into_the_next() -> None:
    memory = TrialMemory()
    with standin(competence=0.2) as client:
        first = run(client, "reflexion", memory=memory)
        second = run(client, "reflexion", seed=1, memory=memory)
    assert not first.outcome.success
    requests = first.requests()
    assert [r["purpose"] for r in requests] == ["plan_joint"] * first.outcome.steps + ["reflect"]
    assert first.outcome.queries == len(requests) == first.outcome.steps + 1
    reflect = user(requests[-1])
    # the reflection request holds the whole trial and asks why it failed
    assert all(f"step {s}: " in section(reflect, "History") for s in range(first.outcome.steps))
    assert "why the trial went as it did" in section(reflect, "Reply")
    (reflection,) = first.kind("reflection")
    assert memory.reflections[0] == reflection["text"] and reflection["text"]
    # the reflection is asked once the episode is over, before its outcome is written
    assert [r["kind"] for r in first.records[-2:]] == ["reflection", "outcome"]
    # no trial before the first: no reflection in its prompts; every prompt of the next has it
    assert all("Reflection" not in section(user(r), "Feedback") for r in requests)
    carried = f"Reflection 1: {memory.reflections[0]}"
    later = [r for r in second.requests() if r["purpose"] == "plan_joint"]
    assert later and all(carried in section(user(r), "Feedback").splitlines() for r in later)
    assert second.kind("setup")[0]["trial_memory"] == {
        "reflections": memory.reflections[:1],
        "keep": 3,
    }


def test_react_does_not_reflect() -> None:
    with standin(competence=0.2) as client:
        result = run(client, "react", memory=TrialMemory())
    assert not result.outcome.success
    assert {r["purpose"] for r in result.requests()} == {"plan_joint"}


def test_roco_talks_then_executes_and_sends_an_infeasible_plan_back_with_the_reason() -> None:
    agents = list(find_team_task("sort_cubes").agent_names)
    with standin(competence=0.4) as client:
        result = run(client, "roco", "sort_cubes", "level5", settings={"refine_limit": 3})
    assert result.outcome.queries == len(result.requests())
    sent_back = 0
    for records in result.steps():
        requests = [r for r in records if r["kind"] == "request"]
        checks = [r for r in records if r["kind"] == "check" and r["check"] == "legal"]
        rounds = [requests[i : i + len(agents)] for i in range(0, len(requests), len(agents))]
        assert 1 <= len(rounds) <= 4 and len(checks) <= len(rounds)
        replies = {r["id"]: r["text"] for r in records if r["kind"] == "reply"}
        for number, round_ in enumerate(rounds):
            # every agent but the last speaks in turn, then the last answers with EXECUTE
            assert [r["purpose"] for r in round_] == ["dialogue"] * (len(agents) - 1) + [
                "plan_joint"
            ]
            assert [r["agents"] for r in round_[:-1]] == [[a] for a in agents[:-1]]
            assert "EXECUTE" in section(user(round_[-1]), "Reply")
            for speaker, spoken in zip(agents[:-1], round_[:-1], strict=True):
                # each message reaches every later speaker and the EXECUTE request
                message = f"[{speaker}] {' '.join(replies[spoken['id']].split())}"
                later = round_[round_.index(spoken) + 1 :]
                assert all(message in section(user(r), "Feedback") for r in later)
            if number < len(checks) and not checks[number]["ok"]:
                # the next round carries which action is infeasible and why
                sent_back += 1
                nxt = rounds[number + 1] if number + 1 < len(rounds) else []
                for line in checks[number]["feedback"].split("\n"):
                    assert "is infeasible: " in line
                    assert all(line in section(user(r), "Feedback") for r in nxt)
        ran = next(r for r in records if r["kind"] == "env_step")
        if checks and checks[-1]["ok"]:
            assert ran["joint"] == checks[-1]["steps"][0]["args"]
        else:  # re-plans spent: the last plan ran with its infeasible actions as WAIT
            plan = next((r for r in records if r["kind"] == "fallback_plan"), None)
            waits = {agent: "WAIT" for agent in agents}
            assert ran["joint"] == (plan["steps"][0]["args"] if plan else waits)
    assert sent_back, "the episode should have had an infeasible plan sent back"


def test_roco_carries_the_dialogue_of_earlier_steps_and_roco_l_only_the_last() -> None:
    with standin(competence=0.6) as client:
        full = run(client, "roco", "sweep_floor", "Y3_G3")
    with standin(competence=0.6) as client:
        last = run(client, "roco_l", "sweep_floor", "Y3_G3")
    for result, kept in ((full, lambda step: min(step, 12)), (last, lambda step: min(step, 1))):
        assert result.outcome.steps >= 3
        for step, records in enumerate(result.steps()):
            first = next(r for r in records if r["kind"] == "request")
            history = section(user(first), "History")
            steps_seen = sorted({int(s) for s in re.findall(r"^step (\d+): ", history, re.M)})
            assert steps_seen == list(range(step - kept(step), step))
            assert all(f"step {s}: EXECUTE " in history for s in steps_seen)


@pytest.mark.parametrize("n", [0, 2])
def test_the_disturbance_reinitialises_at_step_n_and_only_roco_p_is_told(n: int) -> None:
    task = find_team_task("make_sandwich")
    start = make_env(task, "recipe3")
    start.reset(0)
    start_lines = start.describe().splitlines()[:-1]  # the step count line aside
    for name in ("roco_p", "roco", "roco_l", "react", "central_plan"):
        with standin(competence=0.9) as client:
            result = run(client, name, disturb_at=n)
        (disturbance,) = result.kind("disturbance")
        assert disturbance["step"] == n and result.kind("setup")[0]["disturb_at"] == n
        states = result.kind("state")
        steps = [r["step"] for r in result.kind("env_step")]
        assert steps == list(range(len(steps))) and len(steps) > n + 1  # the count goes on
        after = states[n + 1]
        assert after["step"] == n + 1
        assert after["text"].splitlines()[:-1] == start_lines
        assert after["text"].splitlines()[-1] == f"Step {n + 1} of 15 taken."
        index = result.records.index(disturbance)
        # the step's record, then the environment re-initialised and read (format 4)
        before = result.records[index - 3 : index]
        assert [r["kind"] for r in before] == ["env_step", "env", "env"]
        assert before[0]["step"] == n
        assert [r["call"] for r in before[1:]] == ["reset_to", "describe"]
        told = f"the environment was reset at step {n}"
        for request in result.requests():
            text = user(request)
            later = request["seq"] > disturbance["seq"]
            assert (told in text) == (name == "roco_p" and later), (name, request["id"])
            assert "reset" not in text or name == "roco_p"
        if name != "react" and name != "central_plan":
            # the history before the disturbance is left as it was (misaligned)
            nxt = next(r for r in result.requests() if r["seq"] > disturbance["seq"])
            assert f"step {n}: EXECUTE " in section(user(nxt), "History")


def test_a_disturbance_step_must_be_a_step() -> None:
    with standin() as client, pytest.raises(UsageError, match="disturb_at -1"):
        run(client, "roco", disturb_at=-1)


@pytest.mark.parametrize("name", BASELINES)
def test_same_seed_same_outcome(name: str) -> None:
    outcomes = []
    for _ in range(2):
        memory = TrialMemory()
        with standin(seed=3, competence=0.5) as client:
            first = run(client, name, "sort_cubes", "level3", memory=memory, disturb_at=1)
            second = run(client, name, "sort_cubes", "level3", seed=1, memory=memory)
        outcomes.append((first.outcome, second.outcome, memory.reflections))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("name", ["roco_p", "reflexion"])
def test_replay_reproduces_a_disturbed_episode_and_one_with_a_trial_memory(
    tmp_path: Path, robot: RobotConfig, name: str
) -> None:
    task = find_team_task("make_sandwich")
    settings = TeamSettings(task, "recipe3")
    header = team_header(robot, shipped_tasks_dir() / "make_sandwich.toml", name, settings, 1,
                         env="make_sandwich", critic_file=None)  # fmt: skip
    memory = TrialMemory(["Dave should not PUT bread_slice1 table, it was wrong"])
    path = tmp_path / "episode.jsonl"
    with standin(competence=0.3) as client, Recorder(path) as recorder:
        outcome = run_team_episode(make_env(task, "recipe3"), method(name), client, None,
                                   settings, recorder, 1, header=header, disturb_at=2,
                                   memory=memory)  # fmt: skip
    replay = replay_team_episode(path, make_env(task, "recipe3"), None, task)
    assert replay.outcome.to_json() == outcome.to_json()
    assert replay.recorded == outcome.joint_actions
