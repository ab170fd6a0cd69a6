"""The team loops end to end over real HTTP: ReAd-S, ReAd-J, their single-step variants and
Central Plan, the recording and its replay.

Two settings. First, every verdict scripted so each behaviour is pinned exactly:
``ScriptedTeam`` is a loopback OpenAI-compatible server that sees only the HTTP request and
answers each agent (or the joint request) from its own queue of replies, the last one
repeating; ``CubeRelay`` is a three-cube, two-arm symbolic task written here (Alice reaches
the left cubes, Bob the right one; MOVE puts a cube in the bin, reward 1); ``HandCritic``
scores with a hand-set Q over the features and action indices (a useful MOVE is worth 1,
anything else 0), so every score below is known in advance. Second (the end of the file),
the shipped task files and simulators, the team stand-in in its own process, and an ONNX
critic loaded by onboard.collab.critic.Critic, its Q set by hand (not trained).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pytest
from test_cli import onboard

from onboard.base.errors import ReplayDivergence, UsageError
from onboard.collab.episode import TeamOutcome, TeamSettings, run_team_episode, team_header
from onboard.collab.methods import method
from onboard.collab.refine import CriticCheck, LegalCheck, TeamObservation, steps_of
from onboard.collab.replay import replay_team_episode
from onboard.config import LLMConfig, RobotConfig
from onboard.llm.client import ChatClient
from onboard.loop.engine import Check
from onboard.loop.recorder import MemoryRecorder, Recorder, read_recording
from onboard.testing.loopback import LoopbackServer, OwnedHTTPServer
from onboard.testing.standin_server import completion_json

AGENTS = ("Alice", "Bob")
CUBES = ("red_cube", "blue_cube", "green_cube")
SIDE = {"red_cube": "left", "blue_cube": "right", "green_cube": "left"}
REACH = {"Alice": "left", "Bob": "right"}
VOCABULARY = ("ABSENT", "WAIT", "MOVE blue_cube", "MOVE green_cube", "MOVE red_cube")


# -- stand-ins ------------------------------------------------------------------------------


class ScriptedTeam(LoopbackServer):
    """Answers from a queue per agent asked ("joint" for a request for everyone)."""

    def __init__(self, **replies: Iterable[str]) -> None:
        self.queues = {who: deque(r) for who, r in replies.items()}
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        super().__init__()

    def asked(self, body: Mapping[str, Any]) -> str:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        reply = user.split("## Reply\n", 1)[1].splitlines()[0]
        if reply.startswith("Plan the next action for "):
            return reply.removeprefix("Plan the next action for ").split()[0]
        return "joint"

    def users(self, who: str) -> list[str]:
        return [
            next(m["content"] for m in b["messages"] if m["role"] == "user")
            for b in self.bodies
            if self.asked(b) == who
        ]

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.bodies.append(body)
            queue = self.queues.get(self.asked(body))
            if not queue:
                return 500, {"error": {"message": "no scripted reply"}}
            content = queue.popleft() if len(queue) > 1 else queue[0]
        return 200, completion_json("scripted", content, 1)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        owner = cast(ScriptedTeam, cast(OwnedHTTPServer, self.server).owner)
        status, reply = owner.answer(body)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ScriptedTeam.handler = _Handler


@dataclass(frozen=True)
class Result:
    reward: float
    done: bool
    success: bool
    feedback: dict[str, str]


class CubeRelay:
    agents = AGENTS
    vocabulary = VOCABULARY
    feature_names = ("red_cube_in_bin", "blue_cube_in_bin", "green_cube_in_bin", "steps")
    limit = 6

    def __init__(self) -> None:
        self.binned: set[str] = set()
        self.steps, self.done, self.success, self.reward_total = 0, False, False, 0.0
        self.ran: list[dict[str, str]] = []

    def reset(self, seed: int) -> None:
        self.__init__()  # type: ignore[misc]

    def describe(self) -> str:
        return "\n".join(
            f"{c}: {'in the bin' if c in self.binned else 'on the ' + SIDE[c]}" for c in CUBES
        )

    def features(self) -> npt.NDArray[np.float32]:
        binned = [float(c in self.binned) for c in CUBES]
        return np.array([*binned, self.steps / self.limit], dtype=np.float32)

    def agent_actions(self, agent: str) -> list[str]:
        return ["WAIT", *(f"MOVE {c}" for c in sorted(CUBES) if SIDE[c] == REACH[agent])]

    def legal(self, agent: str, action: str, chosen: Mapping[str, str] | None = None) -> str | None:
        if action == "WAIT":
            return None
        cube = action.split()[1]
        if action in (chosen or {}).values():
            return f"{cube} is taken this step"
        if cube in self.binned:
            return f"{cube} is in the bin already"
        if SIDE[cube] != REACH[agent]:
            return f"{agent} cannot reach {cube}"
        return None

    def step(self, joint: Mapping[str, str]) -> Result:
        self.ran.append(dict(joint))
        reward, feedback = 0.0, {}
        for agent in self.agents:
            action = joint.get(agent, "WAIT")
            reason = self.legal(agent, action, {a: x for a, x in joint.items() if a < agent})
            if reason is not None:
                feedback[agent] = f"{action} failed: {reason}"
            elif action != "WAIT":
                self.binned.add(action.split()[1])
                reward += 1.0
        self.steps += 1
        self.reward_total += reward
        self.success = len(self.binned) == len(CUBES)
        self.done = self.success or self.steps >= self.limit
        return Result(reward, self.done, self.success, feedback)


@dataclass(frozen=True)
class Score:
    value: float
    ood: bool


@dataclass
class HandCritic:
    """Q(s, a) = sum of the agents' useful MOVEs (1 each) + c(s), c(s) = -0.1 * cubes left;
    ``ood_after``: states past this share of the step limit are out of distribution."""

    gamma: float = 0.9
    ood_after: float = 1.0
    calls: list[tuple[str, list[int]]] = field(default_factory=list)

    def _q(self, state: npt.NDArray[np.float32], slots: Sequence[int]) -> float:
        moved: set[str] = set()
        value = -0.1 * float(np.sum(state[:3] == 0))
        for agent, index in zip(AGENTS, slots, strict=False):
            action = VOCABULARY[index]
            if not action.startswith("MOVE"):
                continue
            cube = action.split()[1]
            if state[CUBES.index(cube)] == 0 and cube not in moved and SIDE[cube] == REACH[agent]:
                moved.add(cube)
                value += 1.0
        return value

    def local_advantage(
        self, state: npt.NDArray[np.float32], prefix: Sequence[int], action: int
    ) -> Score:
        self.calls.append(("local", [*prefix, action]))
        advantage = self._q(state, [*prefix, action]) - self._q(state, prefix)
        return Score(advantage, bool(state[3] > self.ood_after))

    def joint_advantage(self, state: npt.NDArray[np.float32], joint: Sequence[int]) -> Score:
        self.calls.append(("joint", list(joint)))
        wait = self._q(state, [1] * len(AGENTS))
        advantage = self._q(state, joint) - wait / self.gamma
        return Score(advantage, bool(state[3] > self.ood_after))


@dataclass(frozen=True)
class Critic:
    mode: str = "sequential"
    epsilon: float = 0.5


@dataclass(frozen=True)
class Agent:
    name: str
    role: str
    reach: tuple[str, ...]


@dataclass(frozen=True)
class Task:
    name: str = "cube_relay"
    description: str = "Put every cube in the bin. Alice reaches the left, Bob the right."
    agents: tuple[Agent, ...] = (Agent("Alice", "left arm", ("left",)),
                                 Agent("Bob", "right arm", ("right",)))  # fmt: skip
    step_limit: int = 6
    refine_limit: int = 2
    critic: Critic = Critic()


def text(**actions: str) -> str:
    return "EXECUTE\n" + "\n".join(f"NAME {a} ACTION {x}" for a, x in actions.items())


def client(server: ScriptedTeam) -> ChatClient:
    return ChatClient(LLMConfig(base_url=server.base_url, model="scripted", retries=0))


def episode(
    server: ScriptedTeam,
    name: str,
    critic: HandCritic | None = None,
    recorder: Recorder | None = None,
    *,
    constrained: bool = False,
    env: CubeRelay | None = None,
    header: dict[str, Any] | None = None,
) -> tuple[TeamOutcome, CubeRelay, Recorder]:
    env = env or CubeRelay()
    recorder = recorder or MemoryRecorder()
    settings = TeamSettings(Task(), "only", constrained=constrained)
    with client(server) as llm:
        outcome = run_team_episode(env, method(name), llm, critic, settings, recorder, seed=3,
                                   header=header)  # fmt: skip
    return outcome, env, recorder


def requests(recorder: Recorder) -> list[dict[str, Any]]:
    return [r for r in recorder.records if r["kind"] == "request"]


# -- the loops ------------------------------------------------------------------------------

READ_S_SCRIPT = {
    # step 0: WAIT scores 0 (under 0.5): sent back; then red_cube. Step 1: red_cube is in the
    # bin (infeasible), then green_cube
    "Alice": [text(Alice="WAIT"), text(Alice="MOVE red_cube"), text(Alice="MOVE red_cube"),
              text(Alice="MOVE green_cube")],
    # step 0: blue_cube; step 1: nothing left to do, WAIT refused every round: the fallback
    "Bob": [text(Bob="MOVE blue_cube"), text(Bob="WAIT")],
}  # fmt: skip


def test_read_s_refines_on_the_local_advantage() -> None:
    critic = HandCritic()
    with ScriptedTeam(**READ_S_SCRIPT) as server:
        outcome, env, recorder = episode(server, "read_s", critic)
        alice, bob = server.users("Alice"), server.users("Bob")
    assert outcome.success and outcome.steps == 2
    assert (
        outcome.joint_actions
        == env.ran
        == [
            {"Alice": "MOVE red_cube", "Bob": "MOVE blue_cube"},
            {"Alice": "MOVE green_cube", "Bob": "WAIT"},
        ]
    )
    # the low score went back with its score, and the next agent saw the accepted action
    assert "## Refused this step" not in alice[0]
    assert (
        "## Refused this step\nAlice: WAIT -> score 0.00 (under the threshold 0.50)\n" in alice[1]
    )
    assert "## Chosen this step\nAlice: MOVE red_cube\n" in bob[0]
    # an infeasible proposal is refused with the environment's reason, never scored, never run
    assert ("Alice: MOVE red_cube -> infeasible: red_cube is in the bin already\n") in alice[3]
    assert ("local", [VOCABULARY.index("MOVE red_cube")]) in critic.calls  # step 0 only
    assert sum(c == ("local", [VOCABULARY.index("MOVE red_cube")]) for c in critic.calls) == 1
    # the step's refusals reach the next agent too; the history carries earlier steps' scores
    assert "Alice: MOVE red_cube -> infeasible" in bob[1]
    assert "step 0: Alice: WAIT -> score 0.00 (under the threshold 0.50), refused" in bob[1]
    assert "step 0: Bob: MOVE blue_cube -> score 1.00, accepted" in alice[2]
    # refine_limit = 2: Bob asked 3 times at step 1, then the fallback (WAIT, as nothing
    # refused scored above doing nothing)
    assert len(bob) == 1 + 3
    assert (outcome.vetoes, outcome.failed, outcome.fallbacks, outcome.ood_flags) == (4, 1, 1, 0)
    assert outcome.queries == len(requests(recorder)) == len(server.bodies) == 8
    # the fallback chose among the refused: none scored above WAIT
    chosen = [r["chosen"] for r in recorder.records if r["kind"] == "fallback_choice"]
    assert chosen == [{"Bob": "WAIT"}]
    assert sum(r["kind"] == "fallback" for r in recorder.records) == 1


def test_when_the_rounds_are_spent_the_best_refused_proposal_runs_if_it_beats_waiting() -> None:
    # epsilon 1.5: even a useful MOVE (advantage 1.0) is refused; WAIT's advantage is 0
    script = {"Alice": [text(Alice="MOVE red_cube")], "Bob": [text(Bob="WAIT")]}
    settings = TeamSettings(Task(), "only", epsilon=1.5)
    env, recorder = CubeRelay(), MemoryRecorder()
    with ScriptedTeam(**script) as server, client(server) as llm:
        outcome = run_team_episode(env, method("read_s"), llm, HandCritic(), settings,
                                   recorder, seed=3)  # fmt: skip
        alice = server.users("Alice")
    # Alice: refused 3 times (refine_limit 2), then her best refused proposal runs; Bob's WAIT
    # scores no better than WAIT itself, so WAIT runs
    assert env.ran[0] == {"Alice": "MOVE red_cube", "Bob": "WAIT"}
    choices = [r for r in recorder.records if r["kind"] == "fallback_choice"]
    assert choices[0]["chosen"] == {"Alice": "MOVE red_cube"}
    assert choices[0]["best_score"] == 1.0 and choices[0]["wait_score"] == 0.0
    assert choices[1]["chosen"] == {"Bob": "WAIT"}
    plan = next(r for r in recorder.records if r["kind"] == "fallback_plan")
    assert plan["steps"] == [{"action": "choose", "args": {"Alice": "MOVE red_cube"}}]
    # the next step's history says the choice was a fallback, not accepted
    assert "step 0: Alice: MOVE red_cube -> fallback" in alice[3]
    assert outcome.fallbacks == 2 * outcome.steps and outcome.vetoes >= 3


def test_read_j_reads_a_malformed_reply_as_a_failed_proposal() -> None:
    joint = [
        text(Alice="JUMP", Bob="WAIT"),
        text(Alice="MOVE red_cube", Bob="MOVE blue_cube"),
        text(Alice="MOVE green_cube", Bob="WAIT"),
    ]
    with ScriptedTeam(joint=joint) as server:
        outcome, _, recorder = episode(server, "read_j", HandCritic())
        asked = server.users("joint")
    assert outcome.success and outcome.steps == 2 and outcome.queries == 3
    assert "Alice, Bob: 'EXECUTE NAME Alice ACTION JUMP NAME Bob ACTION WAIT' -> unusable " \
        "reply: unknown action 'JUMP' for Alice" in asked[1]  # fmt: skip
    assert (outcome.failed, outcome.vetoes, outcome.fallbacks) == (1, 0, 0)
    checks = [r for r in recorder.records if r["kind"] == "check" and r["check"] == "critic"]
    # Q(s, a) - Q(s, w) / gamma with c(s) = -0.3 at the start: 2 - 0.3 + 0.3 / 0.9
    assert checks[0]["score"] == pytest.approx(2.0 - 0.3 + 0.3 / 0.9)
    assert "step 0: Alice: MOVE red_cube, Bob: MOVE blue_cube -> score 2.03, accepted" in asked[2]


def test_constrained_requests_carry_the_enum_and_check_the_reply() -> None:
    joint = [
        json.dumps({"Alice": "MOVE red_cube", "Bob": "LEAP"}),  # outside the enum
        json.dumps({"Alice": "MOVE red_cube", "Bob": "MOVE blue_cube"}),
        json.dumps({"Alice": "MOVE green_cube", "Bob": "WAIT"}),
    ]
    with ScriptedTeam(joint=joint) as server:
        outcome, _, _ = episode(server, "read_j", HandCritic(), constrained=True)
        body = server.bodies[0]
        asked = server.users("joint")
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["Alice"]["enum"] == ["WAIT", "MOVE green_cube", "MOVE red_cube"]
    assert schema["properties"]["Bob"]["enum"] == ["WAIT", "MOVE blue_cube"]  # its own only
    assert schema["required"] == ["Alice", "Bob"]
    assert outcome.success and outcome.failed == 1 and outcome.queries == 3
    assert "Alice, Bob: (reply refused) -> unusable reply: reply does not match the JSON " \
        "schema: 'Bob' is \"LEAP\", not one of" in asked[1]  # fmt: skip
    assert "127.0.0.1" not in asked[1]
    assert 'Reply exactly as JSON:\n{"Alice": "<action>", "Bob": "<action>"}' in asked[0]


def test_no_reply_is_a_failed_proposal_and_the_decision_falls_back() -> None:
    script = {"Alice": [text(Alice="MOVE red_cube"), text(Alice="MOVE green_cube")]}  # Bob: 500
    with ScriptedTeam(**script) as server:
        outcome, env, _ = episode(server, "read_s", HandCritic())
        bob = server.users("Bob")
    assert env.ran[:2] == [{"Alice": "MOVE red_cube", "Bob": "WAIT"},
                           {"Alice": "MOVE green_cube", "Bob": "WAIT"}]  # fmt: skip
    assert "Bob: (no reply) -> no reply: no answer within" in bob[1]
    assert not outcome.success and outcome.steps == 6  # blue_cube is Bob's alone
    assert len(bob) == 3 * outcome.steps and outcome.fallbacks >= outcome.steps


def test_single_step_runs_the_first_proposal_and_waits_for_an_infeasible_one() -> None:
    script = {
        "Alice": [text(Alice="MOVE blue_cube"), text(Alice="MOVE red_cube"),
                  text(Alice="WAIT"), text(Alice="MOVE green_cube")],
        "Bob": [text(Bob="WAIT"), text(Bob="MOVE blue_cube"), text(Bob="WAIT")],
    }  # fmt: skip
    with ScriptedTeam(**script) as server:
        outcome, env, _ = episode(server, "read_s_single", HandCritic())
    assert env.ran[:2] == [
        {"Alice": "WAIT", "Bob": "WAIT"},  # Alice cannot reach blue_cube; Bob's WAIT scores 0
        {"Alice": "MOVE red_cube", "Bob": "MOVE blue_cube"},
    ]
    assert outcome.success and outcome.steps == 4
    assert outcome.queries == 2 * outcome.steps  # one request per agent per step
    assert (outcome.vetoes, outcome.failed, outcome.fallbacks) == (0, 1, 1)


def test_central_plan_asks_once_a_step_with_the_history_of_all_agents() -> None:
    joint = [
        text(Alice="MOVE red_cube", Bob="MOVE green_cube"),  # Bob cannot reach it: runs as WAIT
        text(Alice="MOVE green_cube", Bob="MOVE blue_cube"),
    ]
    with ScriptedTeam(joint=joint) as server:
        outcome, _, recorder = episode(server, "central_plan")
        asked = server.users("joint")
    assert outcome.success and outcome.steps == 2 and outcome.queries == 2
    assert "## History\nstep 0: Alice: MOVE red_cube, Bob: MOVE green_cube\n" in asked[1]
    assert "score" not in asked[1]
    steps = [r for r in recorder.records if r["kind"] == "env_step"]
    assert steps[0]["feedback"] == {"Bob": "MOVE green_cube failed: Bob cannot reach green_cube"}
    # only the reply's form is checked: no legality, no critic
    assert {r["check"] for r in recorder.records if r["kind"] == "check"} == {"reply"}


def test_an_out_of_distribution_score_is_unknown_not_a_verdict() -> None:
    critic = HandCritic(ood_after=-1.0)  # every state outside the training range
    with ScriptedTeam(**READ_S_SCRIPT) as server:
        outcome, env, recorder = episode(server, "read_s", critic)
    assert env.ran[0] == {"Alice": "WAIT", "Bob": "MOVE blue_cube"}  # WAIT passed unjudged
    assert outcome.vetoes == 0 and outcome.ood_flags == 2 * outcome.steps
    check = next(r for r in recorder.records if r["kind"] == "check" and r["check"] == "critic")
    assert check["unjudged"] and check["ok"] and check["feedback"].startswith("score unknown")


def test_read_methods_need_a_critic() -> None:
    with ScriptedTeam(**READ_S_SCRIPT) as server, pytest.raises(UsageError, match="critic"):
        episode(server, "read_s", None)
    with pytest.raises(UsageError, match="unknown team method 'teleport'"):
        method("teleport")


def test_the_checks_are_checks_of_the_loop() -> None:
    checks: list[Check] = [LegalCheck(CubeRelay()),
                           CriticCheck(HandCritic(), AGENTS, VOCABULARY, "joint", 0.5)]  # fmt: skip
    assert [c.name for c in checks] == ["legal", "critic"]


@dataclass
class FixedCritic:
    """Every action scores ``value``."""

    value: float

    def local_advantage(
        self, state: npt.NDArray[np.float32], prefix: Sequence[int], action: int
    ) -> Score:
        return Score(self.value, False)

    def joint_advantage(self, state: npt.NDArray[np.float32], joint: Sequence[int]) -> Score:
        return Score(self.value, False)


@pytest.mark.parametrize(
    ("value", "epsilon", "shown"),
    [
        (-0.31, 0.0, "-0.31"),
        (-0.001, 0.0, "-0.001"),
        (0.0996, 0.1, "0.0996"),
        (-4e-9, 0.0, "-4.000e-09"),
    ],
)
def test_a_refused_score_is_shown_under_its_threshold(
    value: float, epsilon: float, shown: str
) -> None:
    check = CriticCheck(FixedCritic(value), AGENTS, VOCABULARY, "sequential", epsilon)
    observation = TeamObservation(0, "", np.zeros(4, dtype=np.float32))
    verdict = check.check(steps_of({"Alice": "WAIT"}), observation)
    assert not verdict.ok
    assert verdict.feedback == f"score {shown} (under the threshold {epsilon:.2f})"


# -- recording and replay -------------------------------------------------------------------


def recorded_episode(tmp_path: Path, robot: RobotConfig) -> tuple[Path, TeamOutcome]:
    """ReAd-S on the cube relay, recorded with its header at ``tmp_path/episode.jsonl``."""
    task_file = tmp_path / "cube_relay.toml"
    task_file.write_text('[task]\nname = "cube_relay"\n', encoding="utf-8")
    settings = TeamSettings(Task(), "only")
    header = team_header(robot, task_file, "read_s", settings, 3, env="cube_relay",
                         critic_file=None)  # fmt: skip
    path = tmp_path / "episode.jsonl"
    with ScriptedTeam(**READ_S_SCRIPT) as server, Recorder(path) as recorder:
        outcome, _, _ = episode(server, "read_s", HandCritic(), recorder, header=header)
    return path, outcome


def test_replay_reproduces_the_joint_actions_and_catches_a_divergence(
    tmp_path: Path, robot: RobotConfig
) -> None:
    path, outcome = recorded_episode(tmp_path, robot)
    replay = replay_team_episode(path, CubeRelay(), HandCritic(), Task())
    assert replay.recorded == replay.outcome.joint_actions == outcome.joint_actions
    assert replay.outcome.to_json() == outcome.to_json()
    records = list(read_recording(path))
    assert records[0]["kind"] == "header" and records[0]["skill_kind"] == "team"
    assert sum(r["kind"] == "request" for r in records) == outcome.queries

    # a recording whose reply differs: the replayed loop runs another action
    lines = path.read_text(encoding="utf-8").splitlines()
    first_reply = next(i for i, line in enumerate(lines) if '"kind": "reply"' in line)
    lines[first_reply] = lines[first_reply].replace("ACTION WAIT", "ACTION MOVE red_cube")
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ReplayDivergence, match=r"request 2 \(\w+\) differs from the recording"):
        replay_team_episode(tampered, CubeRelay(), HandCritic(), Task())


def test_a_replay_answers_the_loop_from_the_recorded_environment(
    tmp_path: Path, robot: RobotConfig
) -> None:
    """Format 4: no environment is given to the replay (none is simulated); every question
    the loop asks of it is answered from the recording's ``env`` records, so an answer
    changed in the recording changes the replay, and a question asked differently is named
    with the record, the field and both values."""
    path, outcome = recorded_episode(tmp_path, robot)
    replay = replay_team_episode(path, None, HandCritic(), Task())
    assert replay.outcome.joint_actions == outcome.joint_actions
    assert replay.outcome.to_json() == outcome.to_json()
    calls = [r["call"] for r in read_recording(path) if r["kind"] == "env"]
    assert calls[0] == "reset" and {"describe", "features", "legal", "step"} <= set(calls)

    def tampered(change: str, field: str, value: Any) -> Path:
        lines = path.read_text(encoding="utf-8").splitlines()
        index = next(i for i, line in enumerate(lines)
                     if json.loads(line).get("call") == change)  # fmt: skip
        record = json.loads(lines[index])
        record[field] = value(record[field])
        lines[index] = json.dumps(record)
        out = tmp_path / f"tampered-{change}.jsonl"
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return out

    # the state as the recording tells it reaches the prompt: the first request differs
    told = tampered("describe", "answer", lambda text: text + "\nA cat sleeps on the table.")
    with pytest.raises(ReplayDivergence, match=r"request 1 \(\w+\) differs.*A cat sleeps"):
        replay_team_episode(told, None, HandCritic(), Task())
    # a legality question about another action than the recorded one
    asked = tampered("legal", "action", lambda action: action + " SOMEWHERE")
    with pytest.raises(ReplayDivergence, match=r"record \d+ \(env legal\): action: recorded "
                                               r"'.+ SOMEWHERE', replayed '.+'"):  # fmt: skip
        replay_team_episode(asked, None, HandCritic(), Task())


def test_same_seed_same_outcome() -> None:
    outcomes = []
    for _ in range(2):
        with ScriptedTeam(**READ_S_SCRIPT) as server:
            outcomes.append(json.dumps(episode(server, "read_s", HandCritic())[0].to_json()))
    assert outcomes[0] == outcomes[1]


# -- on the shipped tasks, with the team stand-in and an ONNX critic ----------------------------
#
# The critic is an ONNX file built with the onnx package (H2's MLP layout, onboard.collab.mlp)
# whose Q is set by hand, not trained: one hidden unit per (agent slot, action), so
# Q(s, a) = sum over slots of VALUE[a_i] + relu(0.1 * steps_left): WAIT is worth -1, any
# other action 0.5. Every WAIT is under epsilon = 0, everything else passes; what is
# exercised is the loop's handling of each verdict, not the critic's judgement.

SHIPPED = Path(__file__).resolve().parent.parent / "tasks"


def table_critic(folder: Path, task: Any, level: str, env: Any, *, ood_high: float = 1.0) -> Path:
    from onboard.collab.card import CriticCard, Metrics, OodRange, Training, card_path, write_card
    from onboard.collab.critic import file_sha256
    from onboard.collab.mlp import MlpWeights, to_onnx

    vocabulary, features, n = list(env.vocabulary), list(env.feature_names), len(env.agents)
    size = len(vocabulary)
    width = n * size + 1
    embed = np.zeros((n * size, width), np.float32)
    out_w = np.zeros(width, np.float32)
    for row in range(n * size):
        action = vocabulary[row % size]
        embed[row, row] = 1.0
        out_w[row] = 0.0 if action == "ABSENT" else (-1.0 if action == "WAIT" else 0.5)
    state_in = np.zeros((len(features), width), np.float32)
    state_in[features.index("steps_left"), -1] = 0.1
    out_w[-1] = 1.0
    weights = MlpWeights(state_in, embed, np.zeros(width, np.float32), (), out_w, 0.0, n)
    model = folder / f"{level}.onnx"
    to_onnx(weights, model)
    card = CriticCard(
        task=task.name, level=level, agents=list(env.agents), vocabulary=vocabulary,
        features=features, gamma=0.9, sha256=file_sha256(model),
        ood=OodRange(low=[0.0] * len(features), high=[ood_high] * len(features), margin=0.0),
        training=Training(data="(set by hand)", episodes=1, heldout_episodes=0, transitions=1,
                          behaviour="none: Q set by hand", augmentation=0.0, seed=0),
        metrics=Metrics(heldout_transitions=0, mse=None, mse_baseline=None,
                        spearman_advantage=None, advantage_pairs=0, wait_gap=None),
    )  # fmt: skip
    write_card(card, card_path(model))
    return model


@pytest.fixture(scope="module")
def standin() -> Iterable[str]:
    from onboard.testing.team_standin import start_team_standin

    url, stop = start_team_standin(seed=5, competence=0.6)
    try:
        yield url
    finally:
        stop()


def shipped(task_name: str, level: str, tmp_path: Path) -> tuple[Any, Any, Any, Path]:
    from onboard.collab.critic import Critic
    from onboard.collab.envs import make_env
    from onboard.collab.taskfile import load_team_task

    task = load_team_task(SHIPPED / f"{task_name}.toml")
    env = make_env(task, level)
    model = table_critic(tmp_path, task, level, env)
    return task, env, Critic.load(model), model


def by_request(records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each request record with the records up to the next request."""
    out: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for record in records:
        if record["kind"] == "request":
            out.append((record, []))
        elif out:
            out[-1][1].append(record)
    return out


@pytest.mark.parametrize(
    ("task_name", "level", "name"),
    [("sweep_floor", "Y2_G3", "read_s"), ("make_sandwich", "recipe1", "read_j"),
     ("sort_cubes", "level1", "read_s")],
)  # fmt: skip
def test_read_loops_on_the_shipped_tasks(
    standin: str, tmp_path: Path, robot: RobotConfig, task_name: str, level: str, name: str
) -> None:
    task, env, critic, model = shipped(task_name, level, tmp_path)
    settings = TeamSettings(task, level, refine_limit=3)
    header = team_header(robot, SHIPPED / f"{task_name}.toml", name, settings, 11,
                         env=task.env, critic_file=model)  # fmt: skip
    path = tmp_path / "episode.jsonl"
    with (
        ChatClient(LLMConfig(base_url=standin, model="team-standin")) as llm,
        Recorder(path) as recorder,
    ):
        outcome = run_team_episode(env, method(name), llm, critic, settings, recorder, 11,
                                   header=header)  # fmt: skip
    records = list(read_recording(path))
    assert outcome.queries == sum(r["kind"] == "request" for r in records)
    exchanges = by_request(records)
    ran = [r["joint"] for r in records if r["kind"] == "env_step"]
    assert ran == outcome.joint_actions and len(ran) == outcome.steps
    # each refusal goes back: the next request of the same decision carries it
    for (request, after), (following, _) in itertools.pairwise(exchanges):
        refusals = [r for r in after if r["kind"] == "check" and not r["ok"]]
        same_step = not any(r["kind"] == "env_step" for r in after)
        if refusals and same_step and following["agents"] == request["agents"]:
            user = following["messages"][1]["content"]
            assert refusals[-1]["feedback"] in user.split("## Refused this step\n", 1)[1]
    # ReAd-S never accepts a WAIT (its local advantage is -1; a joint action with a WAIT in it
    # can pass ReAd-J: Q(s, w) / gamma is lower still); an infeasible proposal never runs
    accepted = [r for r in records if r["kind"] == "check" and r["check"] == "critic" and r["ok"]]
    assert accepted
    if name == "read_s":
        assert all("WAIT" not in r["steps"][0]["args"].values() for r in accepted)
    infeasible = [r for r in records if r["kind"] == "check" and r["check"] == "legal"]
    for check in infeasible:
        step = next(r for r in records if r["kind"] == "env_step" and r["seq"] > check["seq"])
        for agent, action in check["steps"][0]["args"].items():
            reason = check["feedback"]
            if agent in reason or action in reason:
                assert step["joint"][agent] != action or action == "WAIT"
    # refine_limit bounds each decision: at most 1 + 3 requests per agent (ReAd-S) or per
    # step (ReAd-J)
    per_decision: dict[tuple[int, str], int] = {}
    step = 0
    for request, after in exchanges:
        key = (step, ",".join(request["agents"]))
        per_decision[key] = per_decision.get(key, 0) + 1
        step += sum(r["kind"] == "env_step" for r in after)
    assert max(per_decision.values()) <= 1 + 3
    assert outcome.fallbacks == sum(r["kind"] == "fallback" for r in records)
    # the recording replays to the same joint actions
    replayed = replay_team_episode(path, make_env_again(task, level), critic, task,
                                   critic_file=model)  # fmt: skip
    assert replayed.outcome.joint_actions == outcome.joint_actions
    # and from the command line, the task, simulator and critic found from the header alone
    done = onboard("replay", path)
    assert done.code == 0, done.err
    assert "replay reproduces the recorded action sequence" in done.out


def make_env_again(task: Any, level: str) -> Any:
    from onboard.collab.envs import make_env

    return make_env(task, level)


@pytest.mark.parametrize("name", ["read_s_single", "read_j_single", "central_plan"])
def test_the_other_methods_on_sweep_floor(standin: str, tmp_path: Path, name: str) -> None:
    task, env, critic, _ = shipped("sweep_floor", "Y1_G1", tmp_path)
    settings = TeamSettings(task, "Y1_G1", constrained=True)
    recorder = MemoryRecorder()
    with ChatClient(LLMConfig(base_url=standin, model="team-standin")) as llm:
        outcome = run_team_episode(env, method(name), llm, critic if name != "central_plan"
                                   else None, settings, recorder, 4)  # fmt: skip
    per_step = len(env.agents) if name == "read_s_single" else 1
    assert outcome.queries == per_step * outcome.steps == len(requests(recorder))
    assert outcome.vetoes == 0
    assert all(r["constrained"] for r in requests(recorder))


def test_a_critic_that_knows_no_state_vetoes_nothing(standin: str, tmp_path: Path) -> None:
    from onboard.collab.critic import Critic
    from onboard.collab.envs import make_env
    from onboard.collab.taskfile import load_team_task

    task = load_team_task(SHIPPED / "sweep_floor.toml")
    env = make_env(task, "Y1_G1")
    # trained on nothing but all-zero features: every state is out of distribution
    critic = Critic.load(table_critic(tmp_path, task, "Y1_G1", env, ood_high=0.0))
    recorder = MemoryRecorder()
    settings = TeamSettings(task, "Y1_G1")
    with ChatClient(LLMConfig(base_url=standin, model="team-standin")) as llm:
        outcome = run_team_episode(env, method("read_s"), llm, critic, settings, recorder, 2)
    scored = [r for r in recorder.records if r["kind"] == "check" and r["check"] == "critic"]
    assert scored and all(r["ok"] and r["unjudged"] for r in scored)
    assert outcome.vetoes == 0 and outcome.ood_flags == len(scored)


def test_same_seed_same_json_with_the_standin(tmp_path: Path) -> None:
    """Two fresh stand-ins of one seed (its draws count the requests it has seen), the same
    env seed, the same critic: the same outcome, byte for byte."""
    from onboard.testing.team_standin import start_team_standin

    task, _, critic, _ = shipped("make_sandwich", "recipe2", tmp_path)
    outcomes = []
    for _ in range(2):
        env = make_env_again(task, "recipe2")
        url, stop = start_team_standin(seed=9, competence=0.5)
        try:
            settings = TeamSettings(task, "recipe2")
            with ChatClient(LLMConfig(base_url=url, model="team-standin")) as llm:
                outcome = run_team_episode(
                    env, method("read_s"), llm, critic, settings, MemoryRecorder(), 7
                )
        finally:
            stop()
        outcomes.append(json.dumps(outcome.to_json(), sort_keys=True))
    assert outcomes[0] == outcomes[1]
    assert json.loads(outcomes[0])["queries"] > json.loads(outcomes[0])["steps"]
