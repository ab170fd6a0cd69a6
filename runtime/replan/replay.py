"""Replay of a code episode: the loop run again offline on what was recorded.

The bots answer from the recorded replies (each request rebuilt by the loop must equal the
recorded one: the prompts, the errors carried, the images by hash); the world gives back the
recorded observations (the camera frames from the recording's images folder, the perceived
scene states), the recorded dry-run results and the recorded runs. What is compared is the
sequence of the loop's decisions (each check passed or failed, each run, the Extra Bot's
verdicts): a change in how replies are read, how checks decide or how prompts are built
shows as a divergence. Nothing moves and no model is asked. The skill is the recording's
own (its header carries the code skill's TOML), so a replay runs the loop the episode ran.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from onboard.base.errors import RecordingError, RecordingFormatError
from onboard.loop.recorder import Recorder, read_recording
from onboard.loop.recording import images_dir, read_header
from onboard.loop.replies import exchanges_of
from onboard.loop.skill import load_skill_text
from onboard.perception.unknown import Unknown
from onboard.replan.bots import ROLES, Bots, RecordedBot
from onboard.replan.episode import Corrections, run_code_episode
from onboard.replan.names import CODE_COMMANDS
from onboard.replan.sandbox import RunResult
from onboard.replan.scene_state import ObjectState, SceneState

__all__ = ["replay_code_recording", "state_from_record"]


class _Diverged(Exception):
    """The replayed loop asked the world for more than the recording holds."""


def state_from_record(record: Mapping[str, Any]) -> SceneState:
    """A :class:`SceneState` from its ``to_record()``."""
    objects = tuple(
        ObjectState(
            name=o["name"],
            kind=o["kind"],
            position=tuple(o["position"]),
            size=None if o.get("size") is None else tuple(o["size"]),
            on=o.get("on"),
            inside=o.get("inside"),
        )
        for o in record.get("objects", [])
    )
    view = record.get("view")
    return SceneState(
        objects=objects,
        held=record.get("held"),
        view=None if view is None else str(view),
        unknown=tuple(Unknown.from_record(u) for u in record.get("unknown", [])),
    )


class _RecordedWorld:
    def __init__(self, records: list[dict[str, Any]], path: Path) -> None:
        self.fixtures = ""
        self._looks: Iterator[dict[str, Any]] = iter(
            [r for r in records if r["kind"] == "observation"]
        )
        self._runs: Iterator[dict[str, Any]] = iter([r for r in records if r["kind"] == "run"])
        self._images = images_dir(path)
        self._t = 0.0

    def look(self) -> tuple[bytes | None, SceneState]:
        record = next(self._looks, None)
        if record is None:
            raise _Diverged("the loop looked more often than recorded")
        self._t = float(record.get("t") or 0.0)
        frame = None
        if record.get("image"):
            # an image is stored when a bot is sent it: the last look's, which the goal's
            # relations decided without the Extra Bot, never was; had one been sent and then
            # lost, the replayed request would differ from the recorded one
            found = sorted(self._images.glob(f"{record['image']}.*"))
            frame = found[0].read_bytes() if found else None
        return frame, state_from_record(record["state"])

    def run(self, program: str) -> RunResult:
        record = next(self._runs, None)
        if record is None:
            raise _Diverged("the loop ran more programs than recorded")
        ended = str(record["ended"])
        reason, _, message = ended.partition(": ")
        ok = ended == "ok"
        return RunResult(
            ok=ok,
            reason=None if ok else reason,
            message="" if ok else message,
            steps=int(record.get("steps", 0)),
            calls=[],
            output=str(record.get("output", "")),
        )

    def halt(self) -> None:
        """Nothing moves in a replay."""

    def now(self) -> float:
        return self._t


def _dry_runner(records: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    recorded = iter([r for r in records if r["kind"] == "dry_run"])

    def dry(scene: SceneState, first: str, second: str | None) -> tuple[list[str], str | None]:
        record = next(recorded, None)
        if record is None:
            raise _Diverged("the loop dry-ran more often than recorded")
        return list(record["problems"]), record["difference"]

    return dry


def _bots(records: list[dict[str, Any]]) -> dict[str, RecordedBot]:
    return {role: RecordedBot(role, exchanges_of(records, role)) for role in ROLES}


def replay_code_recording(path: Path) -> tuple[list[str], list[str]]:
    """``(recorded, replayed)`` decision sequences of a code episode's recording; a request
    that differs from the recorded one is added to the replayed sequence as a divergence."""
    records = list(read_recording(path, images=True))
    header = read_header(records, path)
    start = next((r for r in records if r["kind"] == "setup"), None)
    end = next((r for r in records if r["kind"] == "outcome"), None)
    if header.format < 3:
        raise RecordingFormatError(
            f"{path}: a format {header.format} code episode: it ran on ReplanVLM's own loop, "
            "before code skills ran on the skill runner (format 3); record it again "
            "(onboard code do)"
        )
    if start is None or end is None:
        raise RecordingError(f"{path}: not a complete code episode (no setup or outcome record)")
    skill = load_skill_text(header.skill.toml, header.skill.file, (), {"code": CODE_COMMANDS})
    options = start["corrections"]
    corrections = Corrections(
        internal=options["internal"],
        external=options["external"],
        cycles=options["cycles"],
        replans=options["replans"],
        text_only=options["text_only"],
        goal=options.get("goal", False),
        inner_text_only=options.get(
            "inner_text_only", False
        ),  # recorded before the goal reader: the Extra Bot alone
    )
    goals = [_image_bytes(path, sha) for sha in start.get("goal_images", [])]
    bots = _bots(records)
    try:
        outcome = run_code_episode(
            _RecordedWorld(records, path),
            start["instruction"],
            Bots(bots["decision"], bots["inner"], bots["extra"]),
            corrections,
            Recorder(None),
            dry=_dry_runner(records) if options.get("dry_run") else None,
            goal_images=goals,
            goal_notes=start.get("goal_notes", []),
            image_format=start.get("image_format", "png"),
            skill=skill,
        )
    except _Diverged as exc:
        return list(end["decisions"]), [f"diverged: {exc}"]
    replayed = list(outcome.decisions)
    for bot in bots.values():
        replayed += [f"diverged: {d}" for d in bot.diverged]
    return list(end["decisions"]), replayed


def _image_bytes(path: Path, sha256: str) -> bytes:
    found = sorted(images_dir(path).glob(f"{sha256}.*"))
    if not found:
        raise RecordingError(f"{path}: image {sha256[:12]} is missing from its images folder")
    return found[0].read_bytes()
