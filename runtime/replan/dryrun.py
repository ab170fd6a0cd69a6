"""The dry run: a program on a fresh twin of the perceived scene, before the robot runs it.

:func:`dry_run` builds the twin (:mod:`onboard.replan.dry_twin`: the workcell's fixtures,
the movable objects where they were seen), runs the program in the sandbox against a robot
API on it, and records the calls, the scene at the end (perceived as the robot would, the arm
at home), how the run ended, and the problems, each one sentence for the Decision Bot:

- collisions: the arm touching the table, a fixture, or an object it is not picking or
  holding (the twin's contact points, above :data:`TOUCH_FORCE`); an object moved by more
  than :data:`DISTURBED` that was not picked (knocked, pushed, carried along on top of the
  one picked), except what a conveyor carries (and what stands on what it carries);
- poses out of reach (the twin's IK), SafeArm's refusals, grasps that close on nothing or
  on another object, and a held object dropped.

The dry run knows only what was seen: an object the camera did not see is not in its twin
(a closed drawer's block); when a program stops after opening a drawer with nothing found in
it, the dry run says so in ``limits`` and sets ``unseen``: a limit of perception, not a fault
of the program. :func:`compare` tells whether two dry runs end the same way.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onboard.base.errors import ArmError, OnboardError, SafetyError
from onboard.config import RobotConfig
from onboard.replan.api import RobotAPIError, call, call_text
from onboard.replan.dry_twin import DryTwin, dry_twin
from onboard.replan.names import API_NAMES
from onboard.replan.perceive import perceive
from onboard.replan.robot import code_limits
from onboard.replan.sandbox import run
from onboard.replan.scene_state import ObjectState, SceneState

if TYPE_CHECKING:
    from onboard.drivers.twin.world import Snapshot

__all__ = ["DISTURBED", "POSITION", "TOUCH_FORCE", "DryRun", "compare", "dry_run"]

#: newtons of contact between the arm and something it should not touch that is a collision
TOUCH_FORCE = 2.0
#: metres an object not picked may move in one call before it counts as knocked
DISTURBED = 0.03
#: metres two dry runs may leave an object apart and agree (if neither moved it)
POSITION = 0.03
#: physics steps between two looks at the contacts
CONTACT_EVERY = 4
#: the Panda's links (drivers/twin/panda.py): the hand, the fingers; lower ones are the arm
HAND, FINGERS = 8, (9, 10)


@dataclass(frozen=True)
class DryRun:
    calls: list[str]  # the API calls made, e.g. 'pick("red block")', in order
    final: SceneState  # the dry-run twin's scene at the end (the arm at home)
    ended: str  # "ok" or the sandbox's reason word ("api", "error", "steps", ...)
    message: str  # the error line when not ok
    problems: list[str]  # collisions, unreachable poses, failed grasps, SafeArm refusals
    seconds: float  # wall time of the dry run
    start: SceneState = field(default_factory=SceneState)  # the scene it was built from
    limits: list[str] = field(default_factory=list)  # what the dry run could not know
    unseen: bool = False  # it stopped where the dry run could not see (limits say where)

    @property
    def clean(self) -> bool:
        """No problems, and it ran to its end or stopped only where it could not see."""
        return not self.problems and (self.ended == "ok" or self.unseen)


def dry_run(robot: RobotConfig, scene: SceneState, program: str, fixtures: str) -> DryRun:
    """``program`` on a fresh twin built from ``scene`` (movable objects as perceived) and
    the workcell's fixtures (the scene file or shipped scene named ``fixtures``). A program
    the sandbox refuses raises :class:`~onboard.base.errors.CodeRefused`."""
    began = time.perf_counter()
    with dry_twin(robot, scene, fixtures) as (dry, left_out):
        watch = _Watch(dry)
        with dry.twin.on_step(watch.on_step):
            result = run(
                program, API_NAMES, watch.dispatch, code_limits(robot.code), dry.api.arm.stop
            )
        final = _final(dry, fixtures)
    ended = result.reason or "ok"
    limits = [f"not in the dry run: {what}" for what in left_out]
    unseen = ended != "ok" and not watch.problems and watch.opened is not None
    if unseen:
        limits.append(
            f"the dry run's {watch.opened} opened empty: what is in it was never seen, so "
            f"the program's steps after {watch.opened_call} could not be tried"
        )
    return DryRun(
        calls=watch.calls,
        final=final,
        ended=ended,
        message=result.message,
        problems=watch.problems,
        seconds=round(time.perf_counter() - began, 2),
        start=scene,
        limits=limits,
        unseen=unseen,
    )


def _final(dry: DryTwin, fixtures: str) -> SceneState:
    """The scene at the end, looked at with the arm at home (out of the camera's way)."""
    try:
        dry.api.arm.resume()
        dry.api.home()
    except OnboardError:
        pass  # an arm that cannot get home: the look sees what it can
    return perceive(dry.api, fixtures)


class _Watch:
    """Dispatches the program's calls to the dry-run API and watches the twin meanwhile."""

    def __init__(self, dry: DryTwin) -> None:
        self.dry = dry
        self.calls: list[str] = []
        self.problems: list[str] = []
        self.opened: str | None = None  # the drawer last opened, and the call that did
        self.opened_call = ""
        self._call = ""
        self._may_touch: set[int] = set()
        self._touched: dict[int, tuple[str, float]] = {}
        self._exempt_before: set[int] = set()
        self._arm = dry.twin.panda.body
        self._loose = {b: n for b, n in dry.bodies.items() if dry.twin.kind_of(n) not in _STATIC}
        self._carriers = {
            b for b, n in dry.bodies.items() if dry.twin.kind_of(n) in ("conveyor", "drawer")
        }

    def dispatch(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
        text = call_text(name, args, kwargs)
        self.calls.append(text)
        self._call = text
        self._may_touch = self._allowed(name, args, kwargs)
        self._touched = {}
        before = self._positions()
        self._exempt_before = self._exempt(_picked(name, args))
        failure = None
        try:
            result = call(self.dry.api, name, args, kwargs)
        except RobotAPIError as exc:
            failure = _failure(text, exc)
            raise
        finally:
            self._after(name, args, before)  # what it hit first, then how the call failed
            if failure is not None:
                self.problems.append(failure)
        if name == "open_drawer":
            self.opened, self.opened_call = str(args[0] if args else "drawer"), text
        return result

    def on_step(self, snapshot: Snapshot) -> None:
        if snapshot.step % CONTACT_EVERY or not self._call:
            return
        held = self.dry.twin.panda.held
        for link, other, _other_link, force in self.dry.twin.contacts(self._arm):
            if other in (self._arm, held) or other in self._may_touch or force < TOUCH_FORCE:
                continue
            if other == self.dry.twin.table or other in self.dry.bodies:
                part, most = self._touched.get(other, (_part(link), 0.0))
                self._touched[other] = (part, max(most, force))

    # -- the checks of one call --------------------------------------------------------------

    def _allowed(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> set[int]:
        """What the hand may touch in this call: the object it picks, the container it puts
        into, the belt or plate it picks from or puts on; the drawer it opens or closes and,
        as it grasps the low handle, the table."""
        target = args[0] if args else next(iter(kwargs.values()), None)
        bodies = {b for b, n in self.dry.bodies.items() if n == target}
        kinds: set[str] = set()
        if name in ("pick", "place", "put_in"):
            kinds = {"conveyor", "plate"}
        elif name in ("open_drawer", "close_drawer"):
            kinds = {"drawer"}
            bodies.add(self.dry.twin.table)
        return bodies | {b for b, n in self.dry.bodies.items() if self.dry.twin.kind_of(n) in kinds}

    def _exempt(self, target: str | None) -> set[int]:
        """Loose bodies that may move in this call: what the hand holds or touches, what
        rides a conveyor or a drawer."""
        twin = self.dry.twin
        out = {twin.panda.held} if twin.panda.held is not None else set()
        out |= {other for _l, other, _o, _f in twin.contacts(self._arm)}
        return out | self._riders(target)

    def _after(self, name: str, args: list[Any], before: dict[int, tuple[float, ...]]) -> None:
        twin, api = self.dry.twin, self.dry.api
        after = self._positions()
        target = _picked(name, args)
        for body, (part, force) in self._touched.items():
            if body not in self._loose:
                what = "table" if body == twin.table else self.dry.bodies[body]
                self.problems.append(
                    f"collision in {self._call}: the {part} hit the {what} ({force:.0f} N)"
                )
        for body, where in before.items():
            thing = self._loose[body]
            moved = math.dist(where, after[body])
            if body in self._exempt_before or thing == target or moved < DISTURBED:
                continue
            if body in self._touched:
                part, force = self._touched[body]
                how = f"the {part} hit it ({force:.0f} N)"
            else:
                how = "knocked by what was held, or carried along on what was picked"
            self.problems.append(
                f"the {thing} moved {moved * 100:.0f} cm in {self._call}, not picked: {how}"
            )
        held = twin.panda.held
        held_name = self.dry.bodies.get(held) if held is not None else None
        lifted = target is not None and _rise(before, after, self._loose, target) > DISTURBED
        if name == "pick" and held_name not in (None, target) and not lifted:
            self.problems.append(f"{self._call} took hold of the {held_name} instead")
        believed = api.motions.holding
        if believed is not None and held is None:
            self.problems.append(
                f"after {self._call} the robot believes it holds the {believed}, "
                "but the hand holds nothing: it was dropped or never grasped"
            )
        self._call = ""

    def _positions(self) -> dict[int, tuple[float, ...]]:
        return {b: self.dry.twin.object_pose(n)[0] for b, n in self._loose.items()}

    def _riders(self, target: str | None) -> set[int]:
        """Loose bodies a conveyor or a drawer carries: touching one, or touching a body
        carried (a block on a fruit on the belt rides, and may fall off, with it), unless
        that body is the one being picked (what it carries along is knocked)."""
        touching = {b: {o for _l, o, _p, _f in self.dry.twin.contacts(b)} for b in self._loose}
        riding = {b for b, others in touching.items() if others & self._carriers}
        carrying = {b for b in riding if self._loose[b] != target}
        while more := {b for b, others in touching.items() if others & carrying} - riding:
            riding |= more
            carrying |= {b for b in more if self._loose[b] != target}
        return riding


#: kinds that stand still: never knocked, only hit
_STATIC = frozenset({"conveyor", "drawer", "box"})


def _picked(name: str, args: list[Any]) -> str | None:
    """The object a call picks: ``pick``'s first argument; None for any other call."""
    return str(args[0]) if name == "pick" and args else None


def _part(link: int) -> str:
    if link in FINGERS:
        return "finger"
    return "hand" if link == HAND else "arm"


def _failure(text: str, exc: RobotAPIError) -> str | None:
    """A failed call as a problem: SafeArm's refusal, a pose out of reach, an arm that
    could not get there, a grasp on nothing; None for the program's own mistakes (nothing
    held, no such object), which the run's message says."""
    cause, line = _cause(exc), str(exc)
    if isinstance(cause, SafetyError):
        return f"SafeArm refused {text}: {cause}"
    if isinstance(cause, ArmError) and ("out of reach" in line or "workspace" in line):
        return f"{text} asks for a pose out of the arm's reach: {cause}"
    if isinstance(cause, ArmError):
        return f"the arm failed in {text}: {cause}"
    if "closed on nothing" in line:
        return f"the grasp failed in {text}: {line.split(': ', 1)[-1]}"
    return None


def _rise(
    before: dict[int, tuple[float, ...]],
    after: dict[int, tuple[float, ...]],
    loose: dict[int, str],
    name: str,
) -> float:
    body = next((b for b, n in loose.items() if n == name), None)
    return -1.0 if body is None else after[body][2] - before[body][2]


def _cause(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


# -- comparing two dry runs ----------------------------------------------------------------


def compare(a: DryRun, b: DryRun) -> str | None:
    """None when the two runs end the same way: the same ending, every object resting on or
    in the same thing, moved by both or by neither (or left within :data:`POSITION` of each
    other), the same thing held; else the first difference, one sentence."""
    if (a.ended == "ok") != (b.ended == "ok") or (a.ended != "ok" and a.unseen != b.unseen):
        return f"program A {_ending(a)}, program B {_ending(b)}"
    names = list(dict.fromkeys([o.name for o in (*a.final.objects, *b.final.objects)]))
    for name in names:
        oa, ob = a.final.named(name), b.final.named(name)
        ra, rb = _rests(a.final, name, oa), _rests(b.final, name, ob)
        if ra != rb:
            return f"program A leaves the {name} {ra}, program B leaves it {rb}"
        if oa is None or ob is None:
            continue
        moved_a, moved_b = _moved(a.start, oa), _moved(b.start, ob)
        if moved_a != moved_b:
            mover, other = ("A", "B") if moved_a else ("B", "A")
            return (
                f"program {mover} moves the {name} (it ends {ra}), program {other} leaves it "
                "where it was"
            )
        if not moved_a and math.dist(oa.position, ob.position) > POSITION:
            apart = math.dist(oa.position, ob.position) * 100
            return f"programs A and B leave the {name} {apart:.0f} cm apart"
    if a.final.held != b.final.held:
        return (
            f"program A ends holding {_thing(a.final.held)}, program B holding "
            f"{_thing(b.final.held)}"
        )
    return None


def _ending(run: DryRun) -> str:
    if run.ended == "ok":
        return "runs to its end"
    if run.unseen:
        return "stops where the dry run could not see"
    return f"stops ({run.ended}: {run.message})"


def _rests(state: SceneState, name: str, o: ObjectState | None) -> str:
    if state.held == name:
        return "held"
    if o is None:
        return "out of sight"
    if o.inside is not None:
        return f"in the {o.inside}"
    if o.on == "table" or o.on is None:
        return "on the table"
    return f"on the {o.on}"


def _moved(start: SceneState, o: ObjectState) -> bool:
    was = start.named(o.name)
    return was is None or math.dist(was.position, o.position) >= POSITION


def _thing(name: str | None) -> str:
    return f"the {name}" if name else "nothing"
