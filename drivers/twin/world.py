"""The physics twin: a Panda (or several) at a table with objects and an RGB-D camera, in PyBullet.

A scene's arm may be an SO-101 instead (``[arm] model = "so101"``,
:mod:`~onboard.drivers.twin.so101`): the same calls move it (five joints, its jaw's opening as
the gripper width), and :meth:`Twin.drive_joint`, :meth:`Twin.drive_jaw` and
:meth:`Twin.limp` drive its servos one by one, as its bus emulator does.

Each :class:`Twin` owns its PyBullet client in DIRECT mode (never the global default
client), so several twins coexist in one process. Time advances only through
:meth:`Twin.step`, in fixed steps of 1/240 s. One re-entrant lock guards the client: an arm
stepping in one thread and a camera rendering in another take turns.

After every step the twin publishes a :class:`Snapshot` (the arm, the gripper, the step
count), an immutable value that other threads read without the lock: the arm's state, a
status stream or a test never waits on the motion loop, which re-takes the lock several
times a step. :meth:`Twin.wait_for_step` waits for a step; :meth:`Twin.on_step` runs a hook
in the stepping thread after each step (outside the lock); :meth:`Twin.hold_at` is a hook
that holds the physics at a step until it is released (see :class:`StepGate`).

Frames: objects and the camera are in the world frame (z = 0 is the table top); arm poses
(:class:`~onboard.drivers.arm.base.Pose`) are in the arm's base frame, as every Arm driver's are.

Several arms (a scene's ``[[arms]]``): every arm method takes ``arm``, the arm's name; None
means the first arm (the only one of an ``[arm]`` scene), so single-arm callers name none.
Each arm has its own snapshot (:meth:`Twin.snapshot_of`); :attr:`Twin.snapshot` and the step
hooks see the first arm's. The marker, if any, is on the first arm.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt

from onboard.drivers.arm.base import Pose
from onboard.drivers.camera.base import Intrinsics
from onboard.drivers.rotations import Quat, Vec3
from onboard.drivers.twin import camera
from onboard.drivers.twin.bodies import HANDLE_LINK, Built, build_object, build_table
from onboard.drivers.twin.engine import connect, pybullet_data
from onboard.drivers.twin.marker import HandMarker
from onboard.drivers.twin.panda import IKSolution, Panda
from onboard.drivers.twin.scene import ArmSpec, Scene, default_scene, find_scene, load_scene
from onboard.drivers.twin.so101 import So101Body

__all__ = ["DT", "ArmBody", "Snapshot", "StepGate", "StepHook", "Twin"]

log = logging.getLogger(__name__)

DT = 1.0 / 240.0  # seconds per physics step

#: an arm of the twin: the Panda, or the SO-101
ArmBody = Panda | So101Body


@dataclass(frozen=True)
class Snapshot:
    """The arm as it was after physics step ``step`` (poses in the arm's base frame)."""

    step: int
    time: float  # simulated seconds, ``step * DT``
    ee_pose: Pose
    joints: tuple[float, ...]
    joint_velocities: tuple[float, ...]
    gripper_width: float  # metres between the fingers
    gripper_closed: bool  # commanded closed
    gripper_moving: bool
    held: str | None  # the object the gripper holds


#: runs in the stepping thread after each step, outside the twin's lock
StepHook = Callable[[Snapshot], None]


class StepGate:
    """A step hook that holds the physics once step ``at`` is done, until :meth:`release`.

    The thread that steps the twin blocks inside :meth:`Twin.step` (without the lock), so a
    motion cannot go past step ``at`` however fast the CPU is: a test that waits for
    :meth:`wait_reached`, injects a stop or a fault and only then releases, knows the motion
    was under way and could not have ended before the stop. ``limit`` bounds the hold in
    case nobody releases it.
    """

    def __init__(self, at: int, limit: float = 60.0) -> None:
        self.at = at
        self.limit = limit
        self._reached = threading.Event()
        self._released = threading.Event()

    def __call__(self, snapshot: Snapshot) -> None:
        if snapshot.step < self.at or self._released.is_set():
            return
        self._reached.set()
        if not self._released.wait(self.limit):
            log.warning("twin: nobody released the gate at step %d in %.0f s", self.at, self.limit)
            self._released.set()

    def wait_reached(self, timeout: float) -> bool:
        """True once the physics is held at step ``at``; False after ``timeout`` s."""
        return self._reached.wait(timeout)

    @property
    def reached(self) -> bool:
        return self._reached.is_set()

    def release(self) -> None:
        self._released.set()


class Twin:
    """A PyBullet world built from a scene file (default: ``scenes/tabletop.toml``), or a
    shipped scene's name (``"blocks"``: :func:`~onboard.drivers.twin.scene.find_scene`)."""

    def __init__(self, scene: Scene | Path | str | None = None) -> None:
        if not isinstance(scene, Scene):
            self.path: Path | None = find_scene(scene) if scene is not None else default_scene()
            scene = load_scene(self.path)
        else:
            self.path = None
        self.scene = scene
        self.lock = threading.RLock()
        #: the room's light the camera renders under (None: the renderer's default); a test
        #: or a disturbance dims it (:meth:`set_light`)
        self.light: camera.Light | None = None
        self._steps = 0
        self._stepped = threading.Condition()
        self._hooks: tuple[StepHook, ...] = ()
        self._hooks_lock = threading.Lock()
        self._p = connect()
        self._p.setAdditionalSearchPath(pybullet_data.getDataPath())
        self._p.setGravity(0, 0, -9.81)
        self._p.setTimeStep(DT)
        self.pandas: dict[str, ArmBody] = {}
        try:
            self.table = build_table(self._p, scene.table)
            for name, spec in scene.arm_specs().items():
                self.pandas[name] = (
                    So101Body(self._p, spec)
                    if spec.model == "so101"
                    else Panda(self._p, spec, pybullet_data.getDataPath())
                )
            #: the first arm (the only one of a one-arm scene), and its name
            self._first = next(iter(self.pandas))
            self.panda = self.pandas[self._first]
            self._objects = {spec.name: build_object(self._p, spec) for spec in scene.objects}
        except BaseException:
            for panda in self.pandas.values():
                panda.close()
            self._p.disconnect()
            raise
        self._loose = {b.body for b in self._objects.values() if not b.static}
        self._drawers = {b.body: b for b in self._objects.values() if b.kind == "drawer"}
        #: what a grasp may attach to: loose bodies, and the drawers' handles
        self._grippable = {(body, -1) for body in self._loose}
        self._grippable |= {(body, HANDLE_LINK) for body in self._drawers}
        self._belts = [b for b in self._objects.values() if b.kind == "conveyor"]
        for built in self._objects.values():
            if built.kind == "drawer":
                self._drive_drawer(built, self._p.getJointState(built.body, 0)[0])
        self._closed = False
        self._snapshots = self._take_snapshots()

    def close(self) -> None:
        with self.lock:
            if not self._closed:
                for panda in self.pandas.values():
                    panda.close()
                self._p.disconnect()
                self._closed = True

    def __enter__(self) -> Twin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # time

    @property
    def time(self) -> float:
        """Simulated seconds since the twin was built."""
        return self._steps * DT

    def step(self, seconds: float = DT) -> None:
        """Advance physics by ``seconds`` (rounded to whole steps, at least one); after each
        step publish the snapshot, then run the step hooks."""
        for _ in range(max(1, round(seconds / DT))):
            with self.lock:
                self._move_belts()
                self._p.stepSimulation()
                self._steps += 1
                self._update_grasp()
                snapshot = self._publish()
            for hook in self._hooks:
                hook(snapshot)

    @property
    def snapshot(self) -> Snapshot:
        """The (first) arm after the last step (or teleport, or grip command); never takes
        the lock."""
        return self.snapshot_of()

    def snapshot_of(self, arm: str | None = None) -> Snapshot:
        """Arm ``arm`` after the last step (None: the first arm); never takes the lock."""
        return self._snapshots[self._first if arm is None else self._name(arm)]

    def wait_for_step(self, step: int, timeout: float) -> bool:
        """Wait until physics step ``step`` is done; False after ``timeout`` s."""
        with self._stepped:
            return self._stepped.wait_for(lambda: self.snapshot.step >= step, timeout)

    @contextmanager
    def on_step(self, hook: StepHook) -> Iterator[None]:
        """Run ``hook(snapshot)`` after every step while the block runs (in the stepping
        thread, outside the lock, so it may block that thread but must not step)."""
        with self._hooks_lock:
            self._hooks = (*self._hooks, hook)
        try:
            yield
        finally:
            with self._hooks_lock:
                self._hooks = tuple(h for h in self._hooks if h is not hook)

    @contextmanager
    def hold_at(self, step: int, limit: float = 60.0) -> Iterator[StepGate]:
        """Hold the physics once step ``step`` is done until the gate is released (at the
        latest when the block ends); see :class:`StepGate`."""
        gate = StepGate(step, limit)
        try:
            with self.on_step(gate):
                yield gate
        finally:
            gate.release()

    def settle(self, seconds: float = 0.5) -> None:
        """Let objects come to rest after the scene was built or changed."""
        self.step(seconds)

    # objects

    def object_names(self) -> list[str]:
        return list(self._objects)

    def kind_of(self, name: str) -> str:
        return self._get(name).kind

    def body_of(self, name: str) -> int:
        return self._get(name).body

    def segmentation_id(self, name: str) -> int:
        """The value of ``name``'s pixels in the segmentation image of :meth:`render`."""
        return self._get(name).body

    def name_of(self, body: int) -> str | None:
        return next((n for n, b in self._objects.items() if b.body == body), None)

    def object_pose(self, name: str) -> tuple[Vec3, Quat]:
        """Position (its centre of mass) and orientation of ``name`` in the world frame."""
        with self.lock:
            position, orientation = self._p.getBasePositionAndOrientation(self.body_of(name))
        return tuple(position), tuple(orientation)

    def set_object_pose(self, name: str, position: Vec3, orientation: Quat | None = None) -> None:
        with self.lock:
            body = self.body_of(name)
            if orientation is None:
                orientation = tuple(self._p.getBasePositionAndOrientation(body)[1])
            self._p.resetBasePositionAndOrientation(body, position, orientation)
            self._p.resetBaseVelocity(body, (0, 0, 0), (0, 0, 0))

    def set_drawer(self, name: str, opening: float) -> None:
        """Drive drawer ``name`` towards ``opening`` metres open (it moves as time steps)."""
        built = self._get(name)
        if built.kind != "drawer":
            raise ValueError(f"{name!r} is a {built.kind}, not a drawer")
        with self.lock:
            self._drive_drawer(built, min(max(opening, 0.0), built.drawer_travel))

    def put_drawer(self, name: str, opening: float) -> None:
        """Set drawer ``name`` ``opening`` metres open at once, without simulating the way
        there (as :meth:`set_object_pose` does for an object)."""
        built = self._get(name)
        if built.kind != "drawer":
            raise ValueError(f"{name!r} is a {built.kind}, not a drawer")
        opening = min(max(opening, 0.0), built.drawer_travel)
        with self.lock:
            self._p.resetJointState(built.body, 0, opening)
            self._drive_drawer(built, opening)

    def drawer_opening(self, name: str) -> float:
        with self.lock:
            return float(self._p.getJointState(self.body_of(name), 0)[0])

    # arms (poses in the arm's base frame; ``arm`` names one, None: the first)

    def arm_names(self) -> list[str]:
        """The arms' names, in the scene's order (``["arm"]`` for an ``[arm]`` scene)."""
        return list(self.pandas)

    def arm_spec(self, arm: str | None = None) -> ArmSpec:
        return self._panda(arm).spec

    def to_base(self, point: Vec3, arm: str | None = None) -> Vec3:
        """A world-frame point in the arm's base frame."""
        return self._panda(arm).base.inverse().apply(point)

    def to_world(self, point: Vec3, arm: str | None = None) -> Vec3:
        return self._panda(arm).base.apply(point)

    def joints(self, arm: str | None = None) -> tuple[float, ...]:
        return self.snapshot_of(arm).joints

    def joint_velocities(self, arm: str | None = None) -> tuple[float, ...]:
        return self.snapshot_of(arm).joint_velocities

    def joint_limits(self, arm: str | None = None) -> tuple[tuple[float, ...], tuple[float, ...]]:
        panda = self._panda(arm)
        return panda.lower, panda.upper

    def reset_joints(self, joints: Sequence[float], arm: str | None = None) -> None:
        """Teleport the arm (gripper open), without simulating the way there."""
        with self.lock:
            panda = self._panda(arm)
            drawer = self._held_drawer(panda)
            panda.reset(joints)
            if drawer is not None:
                self._drive_drawer(drawer, self.drawer_opening(drawer.name))
            self._publish()

    def ee_pose(self, arm: str | None = None) -> Pose:
        """The tool (between the finger tips, z along the fingers) in the base frame."""
        return self.snapshot_of(arm).ee_pose

    def forward(self, joints: Sequence[float], arm: str | None = None) -> Pose:
        with self.lock:
            return self._panda(arm).forward(joints).to_pose()

    def solve_ik(
        self, pose: Pose, seed: Sequence[float] | None = None, arm: str | None = None
    ) -> IKSolution:
        """Joints reaching ``pose`` (base frame), checked by forward kinematics."""
        with self.lock:
            return self._panda(arm).solve_ik(pose, seed)

    def set_joint_targets(
        self, joints: Sequence[float], max_velocity: float, arm: str | None = None
    ) -> None:
        """Position-control the 7 arm joints towards ``joints`` at most ``max_velocity`` rad/s."""
        with self.lock:
            self._panda(arm).set_targets(joints, max_velocity)

    def grip(self, close: bool, arm: str | None = None) -> None:
        """Drive the fingers closed (with the configured force) or open; opening releases
        (a drawer let go of is held by its motor again, where it now is)."""
        with self.lock:
            panda = self._panda(arm)
            drawer = self._held_drawer(panda)
            panda.grip(close)
            if drawer is not None and panda.held is None:
                self._drive_drawer(drawer, self.drawer_opening(drawer.name))
            self._publish()

    def drive_joint(
        self, joint: int, target: float, max_velocity: float, arm: str | None = None
    ) -> None:
        """The SO-101's joint ``joint`` (0 pan .. 4 roll) toward ``target`` radians at most
        ``max_velocity`` rad/s, as its servo moves to a goal position."""
        with self.lock:
            self._so101(arm).drive(joint, target, max_velocity)

    def drive_jaw(self, opening: float, max_velocity: float, arm: str | None = None) -> None:
        """The SO-101's moving jaw toward ``opening`` metres (0 closed) at ``max_velocity``
        m/s: narrower than it is grips, wider lets go."""
        with self.lock:
            body = self._so101(arm)
            body.drive_jaw(opening, max_velocity)
            self._publish()

    def limp(self, joint: int | None, arm: str | None = None) -> None:
        """The SO-101's servo ``joint`` (None: the jaw's) with its torque off."""
        with self.lock:
            body = self._so101(arm)
            if joint is None:
                body.limp_jaw()
            else:
                body.limp(joint)

    def arm_model(self, arm: str | None = None) -> str:
        """``"panda"`` or ``"so101"``."""
        return self._panda(arm).spec.model

    def gripper_closed(self, arm: str | None = None) -> bool:
        return self.snapshot_of(arm).gripper_closed

    def gripper_width(self, arm: str | None = None) -> float:
        """Metres between the fingers (0.08 fully open)."""
        return self.snapshot_of(arm).gripper_width

    def gripper_moving(self, arm: str | None = None) -> bool:
        return self.snapshot_of(arm).gripper_moving

    def held_object(self, arm: str | None = None) -> str | None:
        """The object the gripper holds: welded to it, or pressed by both fingers."""
        return self.snapshot_of(arm).held

    # the calibration marker ([arm.marker] in the scene)

    def has_marker(self) -> bool:
        return self.panda.marker is not None

    def marker_body(self) -> int:
        """The marker's body id: its pixels' value in the segmentation image of :meth:`render`."""
        return self._marker().body

    def marker_position(self) -> Vec3:
        """Where the marker's centre is now, world frame (the truth calibration estimates)."""
        with self.lock:
            return self._marker().position()

    # camera

    def render(self, links: bool = False, light: camera.Light | None = None) -> camera.Images:
        """RGB (H, W, 3) uint8, depth (H, W) float32 metres, segmentation (H, W) int32: body
        ids, or with ``links`` body and link (:func:`camera.split_segmentation`); ``light``:
        another than the room's (:attr:`light`, else the renderer's default)."""
        with self.lock:
            return camera.render(self._p, self.scene.camera, links, light or self.light)

    def set_light(self, light: camera.Light | None) -> None:
        """The room's light from now on (None: the renderer's default)."""
        with self.lock:
            self.light = light

    def intrinsics(self) -> Intrinsics:
        return camera.intrinsics(self.scene.camera)

    def camera_pose(self) -> npt.NDArray[np.float64]:
        """Camera-to-world 4x4 (OpenCV axes: x right, y down, z forward)."""
        return camera.camera_pose(self.scene.camera)

    def ray_test(self, start: Vec3, end: Vec3) -> tuple[str | int | None, Vec3]:
        """The first thing on the segment (object name, else body id, else None) and where."""
        with self.lock:
            hit = self._p.rayTest(start, end)[0]
        if hit[0] < 0:
            return None, end
        return self.name_of(hit[0]) or int(hit[0]), tuple(hit[3])

    def contacts(self, body: int) -> list[tuple[int, int, int, float]]:
        """What touches ``body`` now: (its link, the other body, that body's link, the normal
        force in newtons), one per contact point."""
        with self.lock:
            points = self._p.getContactPoints(bodyA=body)
        return [(int(c[3]), int(c[2]), int(c[4]), float(c[9])) for c in points]

    # internals

    def _take_snapshots(self) -> dict[str, Snapshot]:
        """Every arm's snapshot, by name; the dict is replaced whole, so a reader without
        the lock sees one step's snapshots."""
        return {name: self._take_snapshot(p) for name, p in self.pandas.items()}

    def _take_snapshot(self, arm: ArmBody) -> Snapshot:
        joints, velocities = arm.joint_states()
        body = arm.held
        if body is None and arm.closed:
            pinched = arm.pinched(self._grippable)
            body = None if pinched is None else pinched[0]
        return Snapshot(
            step=self._steps,
            time=self._steps * DT,
            ee_pose=arm.tcp().to_pose(),
            joints=joints,
            joint_velocities=velocities,
            gripper_width=arm.width(),
            gripper_closed=arm.closed,
            gripper_moving=arm.finger_speed() > 1e-3,
            held=None if body is None else self.name_of(body),
        )

    def _publish(self) -> Snapshot:
        """Take and publish the snapshot (with the lock held), and wake its waiters."""
        self._snapshots = self._take_snapshots()
        snapshot = self.snapshot
        with self._stepped:
            self._stepped.notify_all()
        return snapshot

    def _marker(self) -> HandMarker:
        if self.panda.marker is None:
            raise ValueError("the scene's arm carries no marker: add [arm.marker] to the scene")
        return self.panda.marker

    def _get(self, name: str) -> Built:
        try:
            return self._objects[name]
        except KeyError:
            known = ", ".join(repr(n) for n in self._objects) or "none"
            raise KeyError(f"no object {name!r} in the scene; objects: {known}") from None

    def _panda(self, arm: str | None) -> ArmBody:
        return self.panda if arm is None else self.pandas[self._name(arm)]

    def _so101(self, arm: str | None) -> So101Body:
        body = self._panda(arm)
        if not isinstance(body, So101Body):
            raise ValueError(f"arm {arm or self._first!r} is a Panda, not an SO-101")
        return body

    def _name(self, arm: str) -> str:
        if arm not in self.pandas:
            known = ", ".join(repr(n) for n in self.pandas)
            raise KeyError(f"no arm {arm!r} in the scene; arms: {known}")
        return arm

    def _held_drawer(self, panda: ArmBody) -> Built | None:
        held = panda.held
        return None if held is None else self._drawers.get(held)

    def _drive_drawer(self, built: Built, opening: float) -> None:
        """The drawer's 30 N motor holds it at ``opening``."""
        self._p.setJointMotorControl2(
            built.body,
            0,
            self._p.POSITION_CONTROL,
            targetPosition=opening,
            force=30.0,
            maxVelocity=0.2,
        )

    def _move_belts(self) -> None:
        held = {p.held for p in self.pandas.values()}
        for belt in self._belts:
            riders = {c[2] for c in self._p.getContactPoints(bodyA=belt.body)}
            for body in riders & self._loose - held:
                linear, angular = self._p.getBaseVelocity(body)
                velocity = (belt.belt[0], belt.belt[1], linear[2])
                self._p.resetBaseVelocity(body, velocity, angular)

    def _update_grasp(self) -> None:
        for arm in self.pandas.values():
            if not (arm.closed and arm.held is None and arm.spec.weld):
                continue
            pinched = arm.pinched(self._grippable)
            if pinched is not None:
                arm.weld(*pinched)
                if pinched[0] in self._drawers:
                    # the hand moves the drawer now: its motor lets go (a passive joint)
                    self._p.setJointMotorControl2(
                        pinched[0], 0, self._p.VELOCITY_CONTROL, targetVelocity=0.0, force=0.0
                    )
