"""SafeArm: commands outside the limits are clamped or refused before any driver sees them.

The wire check runs SafeArm over GcodeArm on the pty emulator, so "what was sent" is read
where the controller received it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
from arm_harness import BOUND, Behind, interrupt, unnumbered
from pydantic import ValidationError

from onboard.base.errors import ArmError, SafetyError
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.gcode import GcodeArm, GcodeArmConfig
from onboard.drivers.arm.safety import Box, SafeArm, SafetyLimits
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators.marlin_pty import MarlinEmulator
from onboard.drivers.twin import SCENES, Twin

SCENE = SCENES / "blocks.toml"
WORKSPACE = Box(min=(0.1, -0.4, 0.0), max=(0.7, 0.4, 0.6))


def limits(mode: str, **changes: object) -> SafetyLimits:
    values: dict[str, object] = {
        "mode": mode,
        "workspace": WORKSPACE,
        "z_floor": 0.15,
        "max_speed": 0.2,
        "default_speed": 0.1,
    }
    return SafetyLimits.model_validate(values | changes)


@pytest.fixture
def twin() -> Iterator[Twin]:
    with Twin(SCENE) as twin:
        yield twin


@pytest.fixture
def backend(twin: Twin) -> Iterator[SimArm]:
    arm = SimArm(twin)
    arm.connect()
    yield arm
    arm.close()


@dataclass
class Wire:
    emulator: MarlinEmulator
    arm: GcodeArm

    def moves(self) -> list[str]:
        return [unnumbered(x) for x in self.emulator.received if unnumbered(x).startswith("G1")]

    def sent(self) -> list[str]:
        return [unnumbered(line) for line in self.emulator.received]


@pytest.fixture
def wire(backend: SimArm) -> Iterator[Wire]:
    with MarlinEmulator(backend, emergency_parser=True) as emulator:
        config = GcodeArmConfig(url=emulator.path, timeout=BOUND, grip_settle=0.0)
        with GcodeArm(config) as arm:
            yield Wire(emulator, arm)


def above(arm: Arm, dz: float) -> Pose:
    here = arm.state().pose
    return replace(here, z=here.z + dz)


# -- clamp and refuse -----------------------------------------------------------------------


def test_clamp_sends_the_clamped_move_and_records_it(wire: Wire, backend: SimArm) -> None:
    safe = SafeArm(wire.arm, limits("clamp"))
    target = replace(backend.state().pose, x=0.45, y=0.0, z=0.05)  # below the 0.15 m floor
    safe.move_to(target, speed=0.5)  # above the 0.2 m/s limit
    sent = safe.sent[-1]
    assert sent.pose is not None and sent.pose.z == pytest.approx(0.15)
    assert sent.speed == pytest.approx(0.2)
    assert any("z" in note for note in sent.clamped)
    assert wire.moves()[-1] == "G1 X450.000 Y0.000 Z150.000 F12000"  # 0.2 m/s = 12000 mm/min
    assert backend.state().pose.z == pytest.approx(0.15, abs=0.005)
    assert "z=0.1500" in (safe.state().last_command or "")


def test_refuse_raises_naming_the_limit_and_sends_nothing(wire: Wire, backend: SimArm) -> None:
    safe = SafeArm(wire.arm, limits("refuse"))
    before = len(wire.moves())
    target = replace(backend.state().pose, z=0.05)
    with pytest.raises(SafetyError, match=r"z=0\.0500 m is below the floor z_floor=0\.1500 m"):
        safe.move_to(target)
    with pytest.raises(SafetyError, match=r"speed=0\.5000 m/s is above max_speed=0\.2000"):
        safe.move_to(above(safe, -0.02), speed=0.5)
    with pytest.raises(SafetyError, match=r"x=0\.9000 m is outside the workspace \(max"):
        safe.move_to(replace(target, x=0.9, z=0.3))
    assert len(wire.moves()) == before
    assert safe.sent == type(safe.sent)()


def test_clamp_moves_a_target_onto_the_workspace_box(backend: SimArm) -> None:
    safe = SafeArm(backend, limits("clamp"))
    safe.move_to(replace(backend.state().pose, x=0.85, y=0.0, z=0.3))
    assert safe.sent[-1].pose is not None
    assert safe.sent[-1].pose.x == pytest.approx(0.7)
    assert backend.state().pose.x == pytest.approx(0.7, abs=0.005)


def test_a_pick_zone_allows_the_tool_below_the_floor(backend: SimArm) -> None:
    zone = Box(min=(0.35, 0.1, 0.0), max=(0.45, 0.2, 0.2))
    safe = SafeArm(backend, limits("refuse", pick_zones=(zone,)))
    safe.move_to(replace(backend.state().pose, x=0.4, y=0.15, z=0.1))
    assert backend.state().pose.z == pytest.approx(0.1, abs=0.005)
    with pytest.raises(SafetyError, match="z_floor"):
        safe.move_to(replace(backend.state().pose, x=0.3, y=0.0, z=0.1))


def test_non_finite_targets_are_refused_even_in_clamp_mode(backend: SimArm) -> None:
    safe = SafeArm(backend, limits("clamp"))
    with pytest.raises(SafetyError, match="NaN"):
        safe.move_to(replace(backend.state().pose, x=math.nan))
    with pytest.raises(SafetyError, match="NaN"):
        safe.move_joints((math.inf,) * 7)


def test_joint_moves_check_speed_range_and_the_tool_position(twin: Twin, backend: SimArm) -> None:
    lower, upper = twin.joint_limits()
    safe = SafeArm(
        backend,
        limits("clamp", max_joint_speed=0.8, joint_min=lower, joint_max=upper),
        forward_kinematics=twin.forward,
    )
    home = twin.joints()
    nudged = (home[0] + 0.1, *home[1:])
    safe.move_joints(nudged, speed=3.0)
    assert safe.sent[-1].speed == pytest.approx(0.8)
    assert max(abs(a - b) for a, b in zip(twin.joints(), nudged, strict=True)) < 0.01
    with pytest.raises(SafetyError, match="joint 1="):
        safe.move_joints((upper[0] + 0.1, *home[1:]))
    low = list(home)
    low[1] = 0.5  # shoulder forward: the tool dives below the floor; joints are never clamped
    assert twin.forward(low).z < 0.15
    with pytest.raises(SafetyError, match="z_floor"):
        safe.move_joints(tuple(low))


def test_connect_caps_the_drivers_acceleration(wire: Wire) -> None:
    SafeArm(wire.arm, limits("refuse", max_acceleration=0.8)).connect()
    assert "M204 S800" in wire.sent()


# -- stop ------------------------------------------------------------------------------------


def test_stop_from_another_thread_during_a_move(twin: Twin, backend: SimArm) -> None:
    safe = SafeArm(backend, limits("refuse"))
    start = backend.state().pose
    target = replace(start, x=0.45, y=0.2, z=0.3)
    behind = Behind(twin, backend)
    done = interrupt(safe, lambda: safe.move_to(target, speed=0.01), safe.stop, behind)
    assert isinstance(done.raised, ArmError) and "stop" in str(done.raised)
    assert safe.state().stopped and not safe.state().moving
    assert math.dist(done.stopped_at.position(), target.position()) > 0.05
    with pytest.raises(ArmError, match=r"resume\(\)"):
        safe.move_to(start)
    safe.resume()
    safe.move_to(start)
    assert math.dist(backend.state().pose.position(), start.position()) < 0.005
    assert [s.op for s in safe.sent] == ["move_to", "stop", "move_to", "resume", "move_to"]


# -- the limits themselves ---------------------------------------------------------------------


def test_limits_reject_inconsistent_values() -> None:
    with pytest.raises(ValidationError, match=r"min\.x"):
        Box(min=(0.5, 0.0, 0.0), max=(0.4, 1.0, 1.0))
    with pytest.raises(ValidationError, match="default_speed"):
        SafetyLimits(max_speed=0.1, default_speed=0.2)
    with pytest.raises(ValidationError, match="joint_min"):
        SafetyLimits(joint_min=(0.0,))
    with pytest.raises(ValidationError, match="mode"):
        SafetyLimits.model_validate({"mode": "ignore"})
