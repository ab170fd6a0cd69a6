"""The seed's two baselines (Table III), on the world the ReplanVLM loop uses: a
:class:`RobotAPI` on the twin or the arm, and the scene as perception gives it, as text.

- **SayCan-style** (:func:`run_saycan`): step by step, the model chooses the next skill from
  a list under constrained decoding (``prompts.saycan_messages``, ``saycan_schema``: the
  reply must be one of the listed steps). The list is built from the API and what is seen
  (:func:`candidate_steps`), filtered by what the robot can do now (SayCan's affordance,
  from its own state: a free hand picks, a full one puts down). Each chosen step is one API
  call made directly (``onboard.replan.api.call``, no sandbox); a failed call's line is
  shown to the model beside that step in the next request; the scene is perceived again
  before each choice; at most ``max_steps`` steps.
- **ProgPrompt-style** (:func:`run_progprompt`): one Decision Bot request with the scene as
  text and no image, its program run once through the sandbox, no correction.

Every exchange is recorded as the bots record theirs (``request``, then ``reply`` with
``sent_at``/``received_at`` or ``error``, with ``bot`` the method's name), with the scene
before each choice (``scene``), each step taken (``step``) or the run (``run``) with its
wall ``seconds``, and the result (``baseline_end``); :func:`recorded_replies` answers from
such a recording, so an episode can be run again on the twin with the same replies.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from onboard.base.errors import CodeRefused, LLMError, OnboardError
from onboard.llm.types import Completes
from onboard.loop.recorder import Recorder
from onboard.loop.replies import RecordedExchanges, exchanges_of
from onboard.replan.api import RobotAPI, call, call_text
from onboard.replan.bots import HttpBot
from onboard.replan.names import API_NAMES
from onboard.replan.perceive import perceive
from onboard.replan.prompts import (
    decision_messages,
    read_proposal,
    saycan_messages,
    saycan_schema,
)
from onboard.replan.sandbox import Limits, run
from onboard.replan.scene_state import SceneState

__all__ = [
    "DONE",
    "MAX_STEPS",
    "SPOTS",
    "Asker",
    "BaselineResult",
    "Step",
    "candidate_steps",
    "free_spots",
    "recorded_replies",
    "run_progprompt",
    "run_saycan",
]

#: the step that ends a SayCan episode: the model says the instruction is carried out
DONE = "done"
#: SayCan steps at most (``done`` included)
MAX_STEPS = 12
#: where on the table ``place([x, y])`` is offered (base frame, m): in front of the arm, in
#: the camera's view, within the safety workspace; only the ones clear of what is seen
SPOTS: tuple[tuple[float, float], ...] = (
    (0.35, -0.30), (0.50, -0.30), (0.35, 0.05), (0.55, 0.05), (0.30, 0.20), (0.40, -0.15),
)  # fmt: skip
#: free spots offered at most
SPOTS_OFFERED = 3
#: metres from a spot to the centre of anything seen, beyond that thing's half size
CLEAR = 0.06
#: kinds things are put into or onto (``put_in``) rather than picked
CONTAINERS = frozenset({"box", "plate"})
#: kinds that are opened and closed, and are containers while open
DRAWERS = frozenset({"drawer"})

#: the scene as perception gives it: ``perceive`` (pass ``lambda api: perceive(api,
#: workcell)`` where conveyors are known from the workcell's scene file)
Perceive = Callable[[RobotAPI], SceneState]


#: what answers a request: :class:`onboard.llm.client.ChatClient`, or a recording's replies
#: (:func:`recorded_replies`)
Asker = Completes


@dataclass(frozen=True)
class Step:
    """One SayCan step: its text (what the model chooses among), the API function (or
    :data:`DONE`) and its arguments."""

    text: str
    name: str
    args: tuple[Any, ...] = ()


@dataclass
class BaselineResult:
    """How a baseline episode ended. ``done``: the method thinks it finished (SayCan chose
    ``done``; ProgPrompt's program ran to its end). ``ended``: ``done``, ``steps`` (SayCan
    ran out of steps), ``ok`` or the sandbox's reason word (ProgPrompt), ``format`` (the
    reply had no plan and code), ``refused`` (the check refused the program), ``no reply``."""

    method: str
    done: bool
    ended: str
    steps: list[str] = field(default_factory=list)
    program: str | None = None
    errors: list[str] = field(default_factory=list)
    model_calls: int = 0
    model_seconds: float = 0.0
    robot_seconds: float = 0.0

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def _label(name: str) -> str:
    """An object's name as a step label writes it: bare, ``pick(red block)``. A label is an
    enum value of the constrained reply, and llama.cpp's grammar conversion (llama-cpp-python
    0.3.36) kills its server on an enum string holding a double quote."""
    return name.replace('"', "'")


def free_spots(
    scene: SceneState,
    spots: Sequence[tuple[float, float]] = SPOTS,
    used: Collection[tuple[float, float]] = (),
) -> list[tuple[float, float]]:
    """The first :data:`SPOTS_OFFERED` of ``spots`` clear of everything seen and not
    ``used`` (spots this episode put something on that was not picked up since: the camera
    may miss it, and the spot is no freer for that)."""
    clear = []
    for spot in spots:
        if spot not in used and all(
            math.dist(spot, o.position[:2]) >= CLEAR + (max(o.size[:2]) / 2 if o.size else 0.03)
            for o in scene.objects
            if o.name != scene.held
        ):
            clear.append(spot)
    return clear[:SPOTS_OFFERED]


def candidate_steps(
    scene: SceneState,
    opened: frozenset[str] = frozenset(),
    spots: Sequence[tuple[float, float]] = SPOTS,
    used: Collection[tuple[float, float]] = (),
) -> list[Step]:
    """The steps the robot can take now, in a fixed order. A free hand: ``pick`` each
    object (not a container or a drawer), ``open_drawer`` each closed drawer,
    ``close_drawer`` each drawer in ``opened`` (opened by this episode). A full hand:
    ``place`` on each other object, ``place([x, y])`` at the free spots (:func:`free_spots`;
    ``used``: the spots this episode put something on), ``put_in`` each
    box, plate and opened drawer, ``give_me``. Always ``home`` and ``done``."""
    steps: list[Step] = []
    loose = [o for o in scene.objects if o.kind not in CONTAINERS | DRAWERS]
    drawers = [o.name for o in scene.objects if o.kind in DRAWERS]
    if scene.held is None:
        steps += [Step(f"pick({_label(o.name)})", "pick", (o.name,)) for o in loose]
        for name in drawers:
            if name in opened:
                steps.append(Step(f"close_drawer({_label(name)})", "close_drawer", (name,)))
            else:
                steps.append(Step(f"open_drawer({_label(name)})", "open_drawer", (name,)))
    else:
        others = [o.name for o in loose if o.name != scene.held]
        steps += [Step(f"place({_label(n)})", "place", (n,)) for n in others]
        for x, y in free_spots(scene, spots, used):
            steps.append(Step(f"place([{x:.2f}, {y:.2f}])", "place", ([x, y],)))
        into = [o.name for o in scene.objects if o.kind in CONTAINERS]
        into += [n for n in drawers if n in opened]
        steps += [Step(f"put_in({_label(n)})", "put_in", (n,)) for n in into]
        steps.append(Step("give_me()", "give_me"))
    steps += [Step("home()", "home"), Step(DONE, DONE)]
    return steps


def run_saycan(
    api: RobotAPI,
    instruction: str,
    asker: Asker,
    recorder: Recorder,
    see: Perceive = perceive,
    max_steps: int = MAX_STEPS,
    spots: Sequence[tuple[float, float]] = SPOTS,
) -> BaselineResult:
    """One SayCan-style episode of ``instruction`` (see the module's doc)."""
    recorder.write("baseline", method="saycan", instruction=instruction, max_steps=max_steps)
    asks = HttpBot("saycan", asker, recorder)
    result = BaselineResult("saycan", done=False, ended="steps")
    began = api.now()
    taken: list[str] = []  # what the model reads: each step, and how a failed one failed
    opened: set[str] = set()
    put: dict[str, tuple[float, float]] = {}  # what this episode put on a spot, and where
    for number in range(1, max_steps + 1):
        scene = see(api)
        recorder.write("scene", bot="saycan", step=number, state=scene.to_record(), t=api.now())
        steps = candidate_steps(scene, frozenset(opened), spots, set(put.values()))
        texts = [s.text for s in steps]
        messages = saycan_messages(instruction, scene.text(), taken, texts)
        try:
            reply = asks.ask("step", messages, saycan_schema(texts))
        except LLMError as exc:
            result.ended = "no reply"
            result.errors.append(f"step {number}: {exc}")
            break
        chosen = _chosen(reply, steps)
        if chosen is None:  # the client checked the schema: only a server ignoring it
            result.ended = "no reply"
            result.errors.append(f"step {number}: the reply is not one of the steps: {reply!r}")
            break
        result.steps.append(chosen.text)
        if chosen.name == DONE:
            recorder.write("step", bot="saycan", step=number, call=DONE, ok=True, t=api.now())
            result.done, result.ended = True, "done"
            break
        wall = time.perf_counter()
        error = _take(api, chosen)
        recorder.write("step", bot="saycan", step=number, call=chosen.text, ok=error is None,
                       error=error, t=api.now(),
                       seconds=round(time.perf_counter() - wall, 4))  # fmt: skip
        if error is None:
            taken.append(chosen.text)
            if chosen.name == "open_drawer":
                opened.add(chosen.args[0])
            elif chosen.name == "close_drawer":
                opened.discard(chosen.args[0])
            elif chosen.name == "pick":
                put.pop(chosen.args[0], None)
            elif chosen.name == "place" and isinstance(chosen.args[0], list) and scene.held:
                put[scene.held] = (chosen.args[0][0], chosen.args[0][1])
        else:
            result.errors.append(error)
            taken.append(f"{chosen.text} failed: {error}")
    result.model_calls, result.model_seconds = asks.calls, round(asks.seconds, 4)
    result.robot_seconds = round(api.now() - began, 3)
    recorder.write("baseline_end", **result.to_record())
    return result


def _chosen(reply: str, steps: Sequence[Step]) -> Step | None:
    try:
        text = json.loads(reply).get("step")
    except (ValueError, AttributeError):
        return None
    return next((s for s in steps if s.text == text), None)


def _take(api: RobotAPI, step: Step) -> str | None:
    """Make the step's API call; its error line, or None when it worked."""
    try:
        call(api, step.name, list(step.args), {})
    except OnboardError as exc:
        return str(exc)
    return None


def run_progprompt(
    api: RobotAPI,
    instruction: str,
    asker: Asker,
    recorder: Recorder,
    limits: Limits,
    see: Perceive = perceive,
) -> BaselineResult:
    """One ProgPrompt-style episode of ``instruction`` (see the module's doc): ``limits``
    are the sandbox's (``onboard.replan.robot.code_limits``)."""
    recorder.write("baseline", method="progprompt", instruction=instruction)
    asks = HttpBot("progprompt", asker, recorder)
    result = BaselineResult("progprompt", done=False, ended="no reply")
    began = api.now()
    scene = see(api)
    recorder.write("scene", bot="progprompt", step=1, state=scene.to_record(), t=api.now())
    try:
        reply = asks.ask("decision", decision_messages(instruction, scene_text=scene.text()), None)
    except LLMError as exc:
        result.errors.append(str(exc))
    else:
        proposal = read_proposal(reply)
        if isinstance(proposal, str):
            result.ended = "format"
            result.errors.append(proposal)
        else:
            result.program = proposal.code
            _run(api, proposal.code, limits, recorder, result)
    result.model_calls, result.model_seconds = asks.calls, round(asks.seconds, 4)
    result.robot_seconds = round(api.now() - began, 3)
    recorder.write("baseline_end", **result.to_record())
    return result


def _run(api: RobotAPI, code: str, limits: Limits, recorder: Recorder, out: BaselineResult) -> None:
    def dispatch(name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
        return call(api, name, args, kwargs)

    wall = time.perf_counter()
    try:
        ran = run(code, API_NAMES, dispatch, limits, api.arm.stop)
    except CodeRefused as exc:
        out.ended = "refused"
        out.errors.append(str(exc))
        recorder.write("run", bot="progprompt", ended="refused", message=str(exc), t=api.now())
        return
    out.ended = ran.reason or "ok"
    out.done = ran.ok
    out.steps = [call_text(n, a, k) for n, a, k in ran.calls]
    if not ran.ok:
        out.errors.append(ran.message)
    recorder.write("run", bot="progprompt", ended=out.ended, message=ran.message,
                   calls=out.steps, output=ran.output, t=api.now(),
                   seconds=round(time.perf_counter() - wall, 4))  # fmt: skip


def recorded_replies(records: Iterable[Mapping[str, Any]], method: str) -> RecordedExchanges:
    """A baseline's recorded exchanges (its ``request`` and ``reply`` or ``error`` records, in
    order) as the client it talked to, so the episode runs again with the same replies; a
    request that differs from the recorded one is noted in ``diverged``."""
    return RecordedExchanges(exchanges_of(records, method), method, strict=False)
