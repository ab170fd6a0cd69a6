"""The robot API of generated code: fifteen functions, the same on the real arm and the twin.

Generated programs name objects by the strings :meth:`RobotAPI.detect` returns and points by
lists of floats (metres, the robot's base frame); every value crossing the API is JSON-able,
because it crosses the sandbox's pipe. Objects are reached through perception only (the
camera, the detector, the hand-eye calibration: :mod:`onboard.replan.seeing`) and the arm's
own state; every motion goes through :class:`SafeArm` (:mod:`onboard.manip.motions`).

:func:`api_doc` is the documentation prompts get, generated from the signatures and the first
paragraph of each docstring; :func:`call` is the sandbox's dispatcher: it checks the name and
the argument types against the signature, and turns every failure into one line
(:class:`RobotAPIError`, ``pick('apple'): no apple seen``).
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from onboard.base.errors import CodeError, OnboardError
from onboard.drivers.arm.safety import SafeArm
from onboard.drivers.camera.base import Camera
from onboard.grounding.mapping import Embeds
from onboard.manip.motions import APPROACH, Motions
from onboard.manip.resolve import ObjectResolver
from onboard.perception.detector import Detector
from onboard.perception.pose import HandEye
from onboard.perception.self_filter import Hand, HandZone
from onboard.replan.drawer import DrawerMotions, HandleMissed
from onboard.replan.names import API_NAMES
from onboard.replan.seeing import Eyes, Look
from onboard.replan.spots import free_spot
from onboard.replan.tracking import Seen

__all__ = ["FUNCTIONS", "RobotAPI", "RobotAPIError", "api_doc", "call", "call_text"]

#: metres between the fingers below which a closed gripper holds nothing
EMPTY_WIDTH = 0.004
#: robot seconds between the two looks that tell whether an object moves
MOTION_LOOK = 0.5
#: m/s: an object slower than this is taken to stand still
STILL = 0.01
#: m/s two speeds measured one after the other may differ by and still be one motion (an
#: object settling, or rocking, shifts as it is seen; a carried one keeps its velocity)
STEADY = 0.02
#: seconds a pick waits at most for an object carried out of reach to stop (at an end stop)
STOP_WAIT = 20.0
#: metres inside the arm's workspace a moving object must be met
REACH_MARGIN = 0.03
#: seconds the fingers take to close on an object they straddle (they close early by this)
CLOSE_LEAD = 0.2
#: seconds of margin the arm gets to be down at the point a moving object will pass
INTERCEPT_MARGIN = 1.0
#: metres the fingers stay below an object's top when they close on it (at most)
GRASP_BELOW_TOP = 0.015
#: metres above the highest thing seen that the hand travels at
CLEARANCE = 0.05
#: metres above the table a point belongs to a container, not the table around it
ABOVE_TABLE = 0.004
#: metres from the grasp point the hand reaches along its fingers' axis, and across it
HAND_ALONG, HAND_ACROSS = 0.11, 0.035
#: depth points above the grasp in the hand's way that make a pick turn the hand a quarter
IN_THE_WAY = 20
#: metres above the tool point the fingers, the hand and the wrist reach: what the camera sees
#: higher up (the arm's own links, over the spot) is not in their way
HAND_HEIGHT = 0.2
#: metres: the radius assumed for a held object of unknown size
HELD_RADIUS = 0.03
#: metres a drawer is pulled open
OPEN_PULL = 0.15
#: metres from a drawer's handle into its open part, where things are put in
INTO_DRAWER = 0.09
#: seconds one wait may last at most
MAX_WAIT = 600.0
#: metres around a point [x, y] whose depth gives the height of the surface there
SURFACE_RADIUS = 0.02
#: depth points a surface needs to be measured (fewer: the point is hidden, the table assumed)
SURFACE_POINTS = 5
#: metres a grasped object is slid away from a neighbour it touches before it is lifted
DRAW_AWAY = 0.01
#: metres between two objects' footprints (as seen) under which they are taken to touch
TOUCHING = 0.015
#: the fraction of an object's height a neighbour must stand level with (not under it or on it)
LEVEL = 0.5
#: depth points on an object's far side, above what it rests on, that block sliding it there
IN_THE_DRAW = 5

F = TypeVar("F", bound=Callable[..., Any])


class RobotAPIError(CodeError):
    """A robot API call failed or was called wrongly; one line: ``pick('apple'): no apple seen``."""


def _api(method: F) -> F:
    """Errors inside a call come out as one RobotAPIError naming the call."""

    @functools.wraps(method)
    def wrapper(self: RobotAPI, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OnboardError as exc:
            raise RobotAPIError(f"{_call_text(method.__name__, args, kwargs)}: {exc}") from exc

    return typing.cast(F, wrapper)


class _Failed(OnboardError):
    """What a call says went wrong (without the call; :func:`_api` adds it)."""


class RobotAPI:
    """The robot as generated code sees it."""

    def __init__(
        self,
        arm: SafeArm,
        camera: Camera,
        detector: Detector,
        hand_eye: HandEye,
        embedder: Embeds,
        pause: Callable[[float], None],
        handover: tuple[float, float, float],
        now: Callable[[], float] = time.monotonic,
        speed: float = 0.2,
        hand_zone: HandZone | None = None,
    ) -> None:
        """``pause(seconds)`` lets robot time pass (``twin.step`` in-process, ``time.sleep``
        on a real robot); ``now()`` is that time (``lambda: twin.time``, ``time.monotonic``);
        ``hand_zone``: robot.toml's ``[hand_zone]``."""
        self.arm = arm
        self.motions = Motions(arm, speed)
        self.eyes = Eyes(camera, detector, hand_eye, now, lambda: Hand.of(arm), hand_zone)
        self.resolver = ObjectResolver(embedder)
        self.pause = pause
        self.now = now
        self.handover = handover
        self.drawers = DrawerMotions(self.motions)
        #: the held object as it was seen before it was picked (its size and height)
        self._held: Seen | None = None

    # -- perception --------------------------------------------------------------------------

    @_api
    def detect(self) -> list[str]:
        """Looks at the table with a fresh camera frame and returns the names of the objects
        seen, e.g. ["red block", "apple", "apple 2"]. A name stays the same from one look to
        the next (same kind, nearest position)."""
        return list(self.eyes.look().objects)

    @_api
    def find(self, description: str) -> str | None:
        """The name of the seen object that best matches the words ("the fruit", "something
        red"), or None if nothing seen matches well."""
        look = self.eyes.last or self.eyes.look()
        return self.resolver.resolve(description, list(look.objects)).name

    @_api
    def where(self, name: str) -> list[float]:
        """[x, y, z] in metres of the object's centre as last seen (robot base frame: x ahead,
        y to the left, z up from the table)."""
        seen = self.eyes.tracker.tracks.get(name)
        if seen is None:
            raise _Failed(f"no {name} seen{self._seen_list()}")
        return [round(v, 4) for v in seen.position]

    @_api
    def objects_on(self, name: str) -> list[str]:
        """The names of the objects resting on the object (a stack on it), bottom to top."""
        look = self._seeing(name)
        stack: list[str] = []
        below = name
        while True:
            above = [n for n, under in look.on.items() if under == below and n not in stack]
            if not above:
                return stack
            below = min(above, key=lambda n: look.objects[n].position[2])
            stack.append(below)

    # -- manipulation ------------------------------------------------------------------------

    @_api
    def pick(self, name: str) -> None:
        """Looks again, grasps the object and lifts it; an object that moves (on a conveyor)
        is met where it will be. Fails if something is held already, the object is not seen
        or out of reach, or the gripper closes on nothing."""
        if self.motions.holding is not None:
            raise _Failed(f"already holding {self.motions.holding}; put it somewhere first")
        seen, velocity = self._motion_of(name)
        if velocity is not None and not self._reachable(*self._meeting(seen, velocity)[:2]):
            # carried out of reach before the hand could meet it: take it once it has stopped
            seen, velocity = self._stopped(name), None
        grasp_z = max(seen.top - min(GRASP_BELOW_TOP, (seen.top - _bottom(seen)) / 2), 0.0)
        rise = grasp_z - _bottom(seen)
        approach = max(APPROACH, self._travel_z(seen) - grasp_z)
        if velocity is None:
            yaw = self._hand_yaw(seen.position[0], seen.position[1], grasp_z, seen.size / 2)
            at = self.motions.pose(seen.position[0], seen.position[1], grasp_z, yaw)
            self.motions.pick(name, at, rise, approach, draw=self._draw_away(seen))
        else:
            self._intercept(name, seen, velocity, grasp_z, rise, approach)
        if self._closed_on_nothing():
            self.motions.release()
            raise _Failed(f"the gripper closed on nothing: {name} was not where it was seen")
        self._held = seen

    @_api
    def place(self, target: str | list[float]) -> None:
        """Puts what is held on an object (its name), or at a point [x, y] on whatever is
        there (the table, a conveyor, a plate)."""
        self._holding_something()
        if isinstance(target, str):
            seen = self._seeing(target).objects[target]
            x, y, top = seen.position[0], seen.position[1], seen.top
        else:
            if len(target) != 2:
                raise _Failed(f"a point on the table is [x, y], got {len(target)} numbers")
            x, y = float(target[0]), float(target[1])
            top = self._surface_at(x, y)
        self._put(x, y, top)

    @_api
    def put_in(self, container: str) -> None:
        """Puts what is held into a box, onto a plate, or into an open drawer (by name)."""
        self._holding_something()
        look = self._seeing(container)
        seen = look.objects[container]
        if seen.label == "drawer":
            handle = self._handles_of(seen, look)[0]  # the nearest
            x, y = self.drawers.inside(handle, self.drawers.centre(seen, look), INTO_DRAWER)
            self._put(x, y, handle[2])
        else:
            # aim at the middle of what stands above the table in its box, not the centre
            # estimate (a surface pushed back by half the width: off for a wide, flat thing),
            # or the free spot nearest it when something lies there already
            points = look.points(container)
            above = points[points[:, 2] > ABOVE_TABLE]
            if len(above) == 0:
                raise _Failed(f"no depth on {container}")
            middle = np.median(above[:, :2], axis=0)
            radius = self._held.size / 2 if self._held is not None else HELD_RADIUS
            x, y, floor = free_spot(above, radius, (float(middle[0]), float(middle[1])))
            self._put(x, y, floor)

    @_api
    def give_me(self) -> None:
        """Holds what is held out at the hand-over pose, for a person to take."""
        self._holding_something()
        self.motions.give(*self.handover)

    @_api
    def open_drawer(self, name: str = "drawer") -> None:
        """Grasps the drawer's handle (as the camera sees it), pulls the drawer open, lets
        go."""
        self._hand_free()
        look = self._seeing(name)
        drawer = look.objects[name]
        centre = self.drawers.centre(drawer, look)
        self._by_handle(drawer, look, lambda h: self.drawers.pull(h, centre, OPEN_PULL))

    @_api
    def close_drawer(self, name: str = "drawer") -> None:
        """Grasps the drawer's handle and pushes the drawer shut, lets go."""
        self._hand_free()
        look = self._seeing(name)
        drawer = look.objects[name]
        centre = self.drawers.centre(drawer, look)

        def push(handle: tuple[float, float, float]) -> None:
            self.drawers.pull(handle, centre, -self.drawers.opening(handle, drawer, look))

        self._by_handle(drawer, look, push)

    @_api
    def move_to(self, x: float, y: float, z: float) -> None:
        """Moves the tool point (between the finger tips, pointing down) to [x, y, z]."""
        self.motions.arm.move_to(self.motions.pose(x, y, z), self.motions.speed)

    @_api
    def wait_until_at(
        self, name: str, x: float, y: float, within: float = 0.05, timeout: float = 30.0
    ) -> bool:
        """Looks every 0.2 s (robot time) until the object is within ``within`` metres of
        [x, y]; True then, False when ``timeout`` seconds pass first."""
        _wait_length(timeout)
        start = self.now()
        while True:
            seen = self.eyes.look().objects.get(name)
            if seen is not None and math.dist(seen.position[:2], (x, y)) <= within:
                return True
            if self.now() - start >= timeout:
                return False
            self.pause(0.2)

    @_api
    def wait(self, seconds: float) -> None:
        """Lets ``seconds`` of time pass, the arm holding still."""
        _wait_length(seconds)
        self.pause(seconds)

    @_api
    def holding(self) -> str | None:
        """The name of what the gripper holds, by the robot's own account, or None."""
        return self.motions.holding

    @_api
    def home(self) -> None:
        """Moves the arm to its home pose (what it holds stays held)."""
        self.motions.home()

    # -- helpers -----------------------------------------------------------------------------

    def _seeing(self, name: str) -> Look:
        look = self.eyes.look()
        if name not in look.objects and name in self.eyes.tracker.tracks:
            # seen before: the arm may hide it now; look again with the arm out of the way
            self.motions.home()
            look = self.eyes.look()
        if name not in look.objects:
            raise _Failed(f"no {name} seen{self._seen_list()}")
        return look

    def _seen_list(self) -> str:
        look = self.eyes.last
        names = ", ".join(look.objects) if look is not None else ""
        return f" (seen: {names})" if names else " (nothing seen)"

    def _holding_something(self) -> None:
        if self.motions.holding is None:
            raise _Failed("nothing is held: pick something first")

    def _hand_free(self) -> None:
        if self.motions.holding is not None:
            raise _Failed(f"the hand holds {self.motions.holding}: put it somewhere first")

    def _travel_z(self, *also: Seen) -> float:
        """The height the hand travels at: clear of everything seen, held object included."""
        look = self.eyes.last
        tops = [s.top for s in (*(look.objects.values() if look else ()), *also)]
        hanging = self.motions.held_rise if self.motions.held_rise is not None else 0.02
        return max(tops, default=0.0) + CLEARANCE + hanging

    def _put(self, x: float, y: float, top: float) -> None:
        rise = self.motions.held_rise if self.motions.held_rise is not None else 0.02
        approach = max(APPROACH, self._travel_z() - (top + rise))
        held = self._held if self._held and self._held.name == self.motions.holding else None
        yaw = self._hand_yaw(x, y, top + rise, 0.0)
        self.motions.place(x, y, top, approach, yaw)
        self._held = None
        if held is not None:
            # the robot knows where it put it: its name stays with it there
            bottom = _bottom(held)
            at = (x, y, top + held.position[2] - bottom)
            self.eyes.tracker.moved(held.name, at, top + held.top - bottom, self.now())

    def _surface_at(self, x: float, y: float) -> float:
        """The height of the surface the camera sees at (x, y) below the hand and what it
        holds (the table, a belt, a plate); the table's if it is hidden there."""
        points = self.eyes.look().points_near(x, y, SURFACE_RADIUS)
        rise = self.motions.held_rise if self.motions.held_rise is not None else 0.0
        below = self.arm.state().pose.z - rise - 0.01
        points = points[points[:, 2] < below]
        if len(points) < SURFACE_POINTS:
            return 0.0
        return max(0.0, float(np.percentile(points[:, 2], 75)))

    def _closed_on_nothing(self) -> bool:
        width = self.arm.state().extra.get("gripper_width")
        return width is not None and width < EMPTY_WIDTH

    def _hand_yaw(self, x: float, y: float, z: float, own: float) -> float | None:
        """The hand's home yaw (None), or turned a quarter when something higher than the
        tool point at (x, y, z) (a cabinet over an open drawer, a drawer's front) stands where
        the hand would come down and less of it stands in the turned hand's way, as the last
        look saw it. ``own``: metres around (x, y) that belong to the object picked."""
        look = self.eyes.last
        if look is None:
            return None
        points = look.points_near(x, y, math.hypot(HAND_ALONG, HAND_ACROSS))
        points = points[(points[:, 2] > z + 0.01) & (points[:, 2] < z + HAND_HEIGHT)]
        points = points[np.hypot(points[:, 0] - x, points[:, 1] - y) > own + 0.01]
        home = self.motions.pose(x, y, z).rz

        def in_the_way(yaw: float) -> int:
            # the fingers close along the tool's y axis: at yaw 0 along the base's y
            along = -(points[:, 0] - x) * math.sin(yaw) + (points[:, 1] - y) * math.cos(yaw)
            across = (points[:, 0] - x) * math.cos(yaw) + (points[:, 1] - y) * math.sin(yaw)
            return int(np.sum((np.abs(along) <= HAND_ALONG) & (np.abs(across) <= HAND_ACROSS)))

        here, turned = in_the_way(home), in_the_way(_half_turn(home + math.pi / 2))
        if here >= IN_THE_WAY and turned < here / 2:
            return _half_turn(home + math.pi / 2)
        return None

    def _draw_away(self, seen: Seen) -> tuple[float, float]:
        """(dx, dy): where to slide the grasped object before lifting it, away from the
        objects beside it that it touches (as the last look saw them), when the camera sees
        room there; (0, 0) when nothing touches it, it is hemmed in, or that side is taken.
        Objects queued at a conveyor's end stop are pressed together: a straight lift drags
        the neighbour up by friction (and over the stop)."""
        look = self.eyes.last
        if look is None:
            return 0.0, 0.0
        x, y = seen.position[0], seen.position[1]
        bottom = _bottom(seen)
        away = np.zeros(2)
        for other in look.objects.values():
            level = min(seen.top, other.top) - max(bottom, _bottom(other))
            offset = np.array([x - other.position[0], y - other.position[1]])
            apart = float(np.hypot(*offset))
            gap = apart - (seen.size + other.size) / 2
            if other.name != seen.name and level > LEVEL * (seen.top - bottom) and gap < TOUCHING:
                away += offset / max(apart, 1e-6)
        if np.hypot(*away) < 0.5:  # nothing beside it, or neighbours on opposite sides
            return 0.0, 0.0
        ux, uy = away / np.hypot(*away)
        # the strip beyond its edge on that side: twice the slide, for the fingers' room
        reach = seen.size / 2 + 2 * DRAW_AWAY
        points = look.points_near(x, y, math.hypot(reach, seen.size / 2))
        along = (points[:, 0] - x) * ux + (points[:, 1] - y) * uy
        across = np.abs(-(points[:, 0] - x) * uy + (points[:, 1] - y) * ux)
        taken = (along > seen.size / 2) & (along <= reach) & (across <= seen.size / 2)
        if int(np.sum(taken & (points[:, 2] > bottom + ABOVE_TABLE))) >= IN_THE_DRAW:
            return 0.0, 0.0
        return float(ux * DRAW_AWAY), float(uy * DRAW_AWAY)

    def _motion_of(self, name: str) -> tuple[Seen, tuple[float, float] | None]:
        """The object as last seen, and its velocity (x, y) in m/s if it moves: seen twice,
        and a third time when it seems to move, to tell a carried object (the same velocity
        again) from one that only settles or rocks where it is."""
        first = self._seeing(name).objects[name]
        self.pause(MOTION_LOOK)
        second = self._seeing(name).objects[name]
        velocity = _velocity(first, second)
        if math.hypot(*velocity) < STILL:
            return second, None
        self.pause(MOTION_LOOK)
        third = self._seeing(name).objects[name]
        again = _velocity(second, third)
        if math.hypot(*again) < STILL or math.dist(velocity, again) > STEADY:
            return third, None
        return third, _velocity(first, third)

    def _stopped(self, name: str) -> Seen:
        """The object once it stands still (looked at every MOTION_LOOK seconds)."""
        last, start = self._seeing(name).objects[name], self.now()
        while self.now() - start < STOP_WAIT:
            self.pause(MOTION_LOOK)
            seen = self._seeing(name).objects[name]
            if math.hypot(*_velocity(last, seen)) < STILL:
                return seen
            last = seen
        raise _Failed(f"{name} is carried out of reach and did not stop in {STOP_WAIT:g} s")

    def _reachable(self, x: float, y: float) -> bool:
        """Whether the hand may go to (x, y): inside SafeArm's workspace, with a margin."""
        box = self.arm.limits.workspace
        return all(
            lo + REACH_MARGIN <= v <= hi - REACH_MARGIN
            for v, lo, hi in zip((x, y), box.min[:2], box.max[:2], strict=True)
        )

    def _meeting(
        self, seen: Seen, velocity: tuple[float, float], approach: float = APPROACH
    ) -> tuple[float, float, float]:
        """Where (x, y) and when a moving object is met: as far ahead on its path as the hand
        needs to get down there first (from ``approach`` m above its top)."""
        here = self.arm.state().pose
        x0, y0 = seen.position[0], seen.position[1]
        travel = math.dist((here.x, here.y, here.z), (x0, y0, seen.top + approach))
        lead = (travel + 2 * approach) / self.motions.speed + INTERCEPT_MARGIN
        return x0 + velocity[0] * lead, y0 + velocity[1] * lead, seen.time + lead

    def _intercept(
        self,
        name: str,
        seen: Seen,
        velocity: tuple[float, float],
        grasp_z: float,
        rise: float,
        approach: float,
    ) -> None:
        """Meet a moving object: the fingers down across its path ahead of it, closing as
        it passes between them."""
        x, y, arrival = self._meeting(seen, velocity, approach)
        # the fingers close across the path: the finger axis at right angles to the motion
        yaw = _half_turn(math.atan2(velocity[1], velocity[0]))
        at = self.motions.pose(x, y, grasp_z, yaw)

        def when_it_passes() -> None:
            wait = arrival - CLOSE_LEAD - self.now()
            if wait > 0:
                self.pause(wait)

        self.motions.pick(name, at, rise, approach, before_close=when_it_passes)

    def _handles_of(self, drawer: Seen, look: Look) -> list[tuple[float, float, float]]:
        """The handles seen near ``drawer``, nearest first."""
        if "handle" not in look.classes:
            raise _Failed("the detector has no 'handle' class: it cannot see the drawer's handle")
        near = [h for h in look.handles if math.dist(h[:2], drawer.position[:2]) < 0.4]
        if not near:
            raise _Failed(f"no handle seen near {drawer.name}")
        return sorted(near, key=lambda h: math.dist(h[:2], drawer.position[:2]))

    def _by_handle(
        self, drawer: Seen, look: Look, move: Callable[[tuple[float, float, float]], None]
    ) -> None:
        """``move`` the drawer by the nearest handle seen; when the hand misses it (two boxes
        seen as a handle, one of them not), by the next one, until one holds."""
        handles = self._handles_of(drawer, look)
        for i, handle in enumerate(handles):
            try:
                move(handle)
                return
            except HandleMissed:
                if i == len(handles) - 1:
                    raise


def _velocity(before: Seen, after: Seen) -> tuple[float, float]:
    """m/s in x and y between two looks at one object."""
    dt = max(after.time - before.time, 1e-6)
    return (
        (after.position[0] - before.position[0]) / dt,
        (after.position[1] - before.position[1]) / dt,
    )


def _bottom(seen: Seen) -> float:
    """Where an object's bottom is: half its size below its centre, under its top."""
    return max(0.0, min(seen.position[2] - seen.size / 2, seen.top - 0.01))


def _half_turn(angle: float) -> float:
    """The angle, or its opposite direction, whichever lies in (-pi/2, pi/2]."""
    while angle > math.pi / 2:
        angle -= math.pi
    while angle <= -math.pi / 2:
        angle += math.pi
    return angle


def _wait_length(seconds: float) -> None:
    if not 0 <= seconds <= MAX_WAIT:
        raise _Failed(f"{seconds} s: a wait is 0 to {MAX_WAIT:g} seconds")


# -- the dispatcher and the documentation -------------------------------------------------

#: the API's names in doc order: one list, the sandbox's (onboard.replan.names)
FUNCTIONS: tuple[str, ...] = API_NAMES


def api_doc() -> str:
    """The robot API as generated code sees it: one signature and its doc per function."""
    hints_of = {name: typing.get_type_hints(getattr(RobotAPI, name)) for name in FUNCTIONS}
    blocks = []
    for name in FUNCTIONS:
        method = getattr(RobotAPI, name)
        hints = hints_of[name]
        params = []
        for p in list(inspect.signature(method).parameters.values())[1:]:
            text = f"{p.name}: {_type_text(hints[p.name])}"
            if p.default is not inspect.Parameter.empty:
                text += f" = {p.default!r}"
            params.append(text)
        head = f"{name}({', '.join(params)}) -> {_type_text(hints['return'])}"
        doc = " ".join(inspect.getdoc(method).split("\n\n")[0].split())  # type: ignore[union-attr]
        blocks.append(f"{head}\n    {doc}")
    return "\n".join(blocks) + "\n"


def call(api: RobotAPI, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> object:
    """Call ``name`` on ``api`` with JSON-decoded arguments, checked against the signature;
    a wrong name, number or type of argument is a RobotAPIError."""
    if name not in FUNCTIONS:
        raise RobotAPIError(f"{name}: not a robot API function; they are: {', '.join(FUNCTIONS)}")
    method = getattr(RobotAPI, name)
    text = _call_text(name, tuple(args), kwargs)
    try:
        bound = inspect.signature(method).bind(api, *args, **kwargs)
    except TypeError as exc:
        raise RobotAPIError(f"{text}: {exc}") from None
    hints = typing.get_type_hints(method)
    for param, value in list(bound.arguments.items())[1:]:
        if not _fits(value, hints[param]):
            if _not_finite(value):
                raise RobotAPIError(f"{text}: {param} must be a finite number, got {value!r}")
            raise RobotAPIError(
                f"{text}: {param} must be {_type_text(hints[param])}, got {_json_type(value)}"
            )
    return method(*bound.args, **bound.kwargs)


def _not_finite(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, list | tuple) and any(_not_finite(v) for v in value)


def _fits(value: object, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and _finite(value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is bool:
        return isinstance(value, bool)
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    raise TypeError(f"the robot API does not check {hint!r}")


def _finite(value: int | float) -> bool:
    return math.isfinite(value)


def _type_text(hint: Any) -> str:
    if hint is type(None):
        return "None"
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return " | ".join(_type_text(h) for h in typing.get_args(hint))
    if origin is list:
        return f"list[{_type_text(typing.get_args(hint)[0])}]"
    return str(hint.__name__)


def _json_type(value: object) -> str:
    names = {bool: "a bool", int: "an int", float: "a float", str: "a str", list: "a list"}
    return "None" if value is None else names.get(type(value), f"a {type(value).__name__}")


def call_text(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """A call as generated code would write it, its arguments as JSON: ``pick("apple")``
    (the traces of runs, dry runs and baseline steps)."""
    parts = [json.dumps(a, ensure_ascii=False) for a in args]
    parts += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _call_text(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
