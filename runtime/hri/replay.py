"""Replay a recorded episode offline: the LLM is answered from the recording.

The recording is all it needs (runtime/loop/recording.py): the skill is loaded from the text
in its header, the robot and scenario from the header too, and the embedder must be the
model recorded (by sha256). Images come back from the folder beside the recording.
The episode is run again with the same skill, scenario and options on the virtual clock,
its observations and the robot's completions played back from the recording (format 4:
runtime/hri/playback.py; a format 3 recording re-simulates its scenario instead);
each LLM request must equal the recorded one and gets the recorded reply (or error) after the
recorded latency; a request the recording never answered (it was in flight when the episode
ended) is never answered in the replay either. A stop signal is replayed at the time it was
recorded. The replay passes when it produces the same action sequence. A recording with no
end record (its process was killed) is an incomplete episode, not a replay.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from onboard.base.errors import IncompleteRecording, RecordingError, ReplayDivergence
from onboard.grounding.embedder import MODEL_FILE
from onboard.hri.critic import critic_model_path
from onboard.hri.playback import PersonPlayback
from onboard.hri.scenario import Scenario
from onboard.hri.session import EpisodeOptions, make_mapper, run_episode
from onboard.hri.world import SimRobot
from onboard.llm.types import ChatResult, Message
from onboard.loop.engine import SkillRunner
from onboard.loop.recorder import MemoryRecorder, read_recording, with_images
from onboard.loop.recording import Header, check_models, read_header
from onboard.loop.replies import RecordedExchanges, exchanges_by_id
from onboard.loop.skill import Skill, load_skill_text

__all__ = [
    "ReplayAsk",
    "ReplayTiming",
    "WorkArrivals",
    "as_recording_error",
    "read_episode",
    "replay",
]

T = TypeVar("T")


class ReplayAsk:
    """Answers requests in the recorded order with the recorded replies (``onboard.loop.
    replies``), as the runner's ``Ask``.

    A request that differs from the recorded one is a divergence: it is kept in
    ``divergence`` (the runner only sees a failed LLM call) and reported after the run.
    """

    def __init__(
        self, records: Sequence[dict[str, Any]], source: Path, arrivals: bool = False
    ) -> None:
        """``arrivals``: deliver each reply at the time it arrived in the recording (a
        wall-clock run, where a reply's latency is only what it waited in flight); else after
        its recorded virtual latency. The replay's clock must be given as ``now`` then."""
        self.source = source
        self.arrivals = arrivals
        self.now: Callable[[], float] | None = None
        self.replies = RecordedExchanges(exchanges_by_id(records), str(source))
        for request, answer in self.replies.exchanges:
            _check_exchange(source, request, answer)

    @property
    def divergence(self) -> str | None:
        return self.replies.diverged[0] if self.replies.diverged else None

    def next_latency(self) -> float:
        following = self.replies.peek()
        if following is None:
            return 0.0
        answer = following[1]
        if answer is None:  # in flight when the episode ended: it never arrives
            return math.inf
        if self.arrivals and self.now is not None and isinstance(answer.get("t"), (int, float)):
            return max(0.0, float(answer["t"]) - self.now())
        return float(answer.get("virtual_latency", 0.0))

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult:
        return self.replies.answer(messages, purpose)


class ReplayTiming:
    """When a recording's inputs come back in its replay. A virtual-clock run's replies come
    after their recorded latencies and its checks at once, as they did; a wall-clock run's
    replay starts its clock at the run's first look and delivers each reply, check and
    verification at the time it arrived (:class:`ReplayAsk` ``arrivals``,
    :class:`WorkArrivals`)."""

    def __init__(self, header: Header, records: Sequence[dict[str, Any]], path: Path) -> None:
        self.records = records
        self.wall = header.options.get("clock") == "wall"
        self.ask = ReplayAsk(records, path, arrivals=self.wall)
        first = next((r.get("t") for r in records if r["kind"] == "observation"), None)
        self.start = float(first) if self.wall and isinstance(first, (int, float)) else 0.0

    def attach(self, runner: SkillRunner) -> None:
        """Give the replay's runner (and clock) to what times the inputs."""
        self.ask.now = runner.clock.now
        if self.wall:
            runner.work_latency = WorkArrivals(self.records, runner.clock.now)


class WorkArrivals:
    """When each piece of the runner's off-loop work (a check, a verification) came back in
    a wall-clock run, read from the records its result wrote (``check``, ``verify``, or
    ``stale`` or ``error`` of that purpose, one group per result): called in order, the
    latency that delivers the next one at its recorded time (never, past the recorded
    ones: it was in flight when the episode ended)."""

    def __init__(self, records: Sequence[dict[str, Any]], now: Callable[[], float]) -> None:
        self.now = now
        self.times: list[float] = []
        last: tuple[str, float] | None = None
        for record in records:
            purpose = _work_purpose(record)
            key = None if purpose is None else (purpose, float(record["t"]))
            if key is not None and key != last:
                self.times.append(key[1])
            last = key
        self._next = 0

    def __call__(self) -> float:
        if self._next >= len(self.times):
            return math.inf
        self._next += 1
        return max(0.0, self.times[self._next - 1] - self.now())


def _work_purpose(record: dict[str, Any]) -> str | None:
    kind = record["kind"]
    if kind == "check" and record.get("check") != "judge":  # the judge is an LLM exchange
        return "check"
    if kind == "verify":
        return "verify"
    if kind == "stale" and record.get("purpose") in ("check", "verify"):
        return str(record["purpose"])
    if kind == "error" and record.get("source") in ("check", "verify"):
        return str(record["source"])
    return None


def _check_exchange(source: Path, request: dict[str, Any], answer: dict[str, Any] | None) -> None:
    """Every field the replay reads has its recorded type, or the recording is refused."""
    fields: list[tuple[dict[str, Any], str, type | tuple[type, ...]]] = [
        (request, "purpose", str),
        (request, "messages", list),
    ]
    if answer is not None and answer["kind"] == "reply":
        fields += [(answer, "text", str), (answer, "latency", (int, float))]
        if "virtual_latency" in answer:
            fields.append((answer, "virtual_latency", (int, float)))
    elif answer is not None:
        fields.append((answer, "message", str))
    for record, key, kind in fields:
        value = record.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise RecordingError(
                f"{source}: record {record.get('seq', '?')} ({record['kind']}): {key!r} is "
                f"{type(value).__name__}, not {_kind_name(kind)}; not a valid onboard recording"
            )


def _kind_name(kind: type | tuple[type, ...]) -> str:
    return (
        "a number" if isinstance(kind, tuple) else {"str": "text", "list": "a list"}[kind.__name__]
    )


def replay(path: Path) -> tuple[list[str], list[str]]:
    """(recorded action sequence, replayed action sequence) of a person recording; raises
    ReplayDivergence. ``onboard replay`` replays either kind (onboard.cli.replay)."""
    return as_recording_error(path, lambda: _replay(path))


def as_recording_error(path: Path, run: Callable[[], T]) -> T:
    """``run()``, a malformed recording's KeyError, TypeError... as one RecordingError line."""
    try:
        return run()
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # pydantic errors included
        what = f"missing {exc}" if isinstance(exc, KeyError) else type(exc).__name__
        raise RecordingError(f"{path}: not a valid onboard recording ({what})") from exc


def read_episode(path: Path) -> tuple[list[dict[str, Any]], Header, dict[str, Any]]:
    """A recording's records, its header and its end record; an episode without an end
    (its process was killed) is an IncompleteRecording."""
    records = list(read_recording(path))
    header = read_header(records, path)
    episodes = sum(r["kind"] == "header" for r in records)
    if episodes > 1:  # a recorder appends: two runs to one path are kept, not replayable as one
        raise RecordingError(
            f"{path}: holds {episodes} episodes (the same --record path was used {episodes} "
            "times; each run appends); a replay takes one: record each run to its own path"
        )
    end = next((r for r in reversed(records) if r["kind"] == "end"), None)
    if end is None:
        raise IncompleteRecording(
            f"{path}: incomplete episode: no end record (its process was killed); the "
            f"{len(records)} records written are intact and can be read, not replayed"
        )
    return records, header, end


def _replay(path: Path) -> tuple[list[str], list[str]]:
    records, header, end = read_episode(path)
    if header.skill_kind != "person":
        raise RecordingError(f"{path}: a {header.skill_kind} recording, not a person one")
    robot = header.robot_config()
    skill = load_skill_text(
        header.skill.toml,
        f"{path} (skill {header.skill.name})",
        robot.drivers.robot.perception,
        SimRobot.COMMANDS,
    )
    skill = _critic_as_recorded(skill, header)
    local = {"embedder": robot.embedder_dir / MODEL_FILE}
    if skill.critic is not None:
        local["critic"] = Path(skill.critic.model)
    check_models(header, local, path)
    scenario = Scenario.model_validate(header.scenario)
    records = list(with_images(records, path))
    timing = ReplayTiming(header, records, path)
    ask = timing.ask
    options = EpisodeOptions(
        clock="virtual",
        start=timing.start,
        action_text=_flag(header.options, "action_text", path),
        second_stage=_flag(header.options, "second_stage", path),
        constrained=_flag(header.options, "constrained", path),
        latency=ask.next_latency,
        keep_candidates=False,
    )
    stop = _stop_as_recorded(end)

    def on_runner(runner: SkillRunner) -> None:
        timing.attach(runner)
        if stop is not None:
            stop(runner)

    playback = PersonPlayback(records, path) if header.format >= 4 else None
    outcome = run_episode(robot, skill, scenario, ask, make_mapper(robot, skill),
                          MemoryRecorder(), options, on_runner=on_runner,
                          playback=playback)  # fmt: skip
    if ask.divergence:
        raise ReplayDivergence(ask.divergence)
    return [a for _, a in end["actions"]], [a for _, a in outcome.actions]


def _critic_as_recorded(skill: Skill, header: Header) -> Skill:
    """The critic the episode ran with, or none (an evaluation with ``--critic none``
    records no critic, whatever the skill's TOML says): the recorded file when it is here
    (``--critic PATH``), else the one the skill names; its sha256 is checked after."""
    recorded = header.models.files.get("critic")
    if skill.critic is None or recorded is None:
        return dataclasses.replace(skill, critic=None)
    here = Path(recorded.file)
    model = here if here.is_file() else critic_model_path(skill.critic.model)
    return dataclasses.replace(skill, critic=skill.critic.model_copy(update={"model": str(model)}))


def _flag(options: dict[str, Any], key: str, path: Path) -> bool:
    value = options.get(key)
    if not isinstance(value, bool):
        raise RecordingError(
            f"{path}: header: [options.{key}] is {type(value).__name__}, not true or false; "
            "not a valid onboard recording"
        )
    return value


_SIGNAL_REASON = re.compile(r"^(SIG[A-Z]+) received$")


def _stop_as_recorded(end: dict[str, Any]) -> Callable[[SkillRunner], None] | None:
    """Replay a signal's stop at the recorded time (recordings before the ``signal`` field
    name it in the end reason)."""
    reason = str(end.get("reason", ""))
    named = _SIGNAL_REASON.match(reason)
    signal = end.get("signal") or (named.group(1) if named else None)
    if signal is None:
        return None
    at = float(end["t"])

    def schedule(runner: SkillRunner) -> None:
        runner.clock.call_at(at, lambda: runner.stop(reason, signal=str(signal)))

    return schedule
