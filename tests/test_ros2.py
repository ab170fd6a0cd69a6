"""The ROS 2 bridge (issue 33, item 6): an episode's joint states and skill states on Zenoh as
a ROS 2 node on rmw_zenoh_cpp receives them, read by a Zenoh session in the test process
(loopback, scouting off, an explicit endpoint) and decoded with rosbags, a ROS 2 message
library from PyPI that shares no code with the bridge.

Where the expected values come from: the type hashes from rosbags' own REP 2011 hashing and,
for std_msgs/msg/String, the value ros2/rmw_zenoh's docs/design.md shows
(``0/chatter/std_msgs::msg::dds_::String_/RIHS01_df668c...``); the attachment's layout
read back with Zenoh's own deserializer (zenoh.ext) as (int64, int64, a list of uint8); the
messages' bytes against rosbags' CDR serializer. No ROS 2 installation is on this machine:
docs/ros2.md says what that leaves unchecked.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_cli import up_robot_copy
from waits import cli_without, until

from onboard.cli.main import main
from onboard.fleet.bus import Bus, open_bus
from onboard.fleet.rosmsg import JOINT_STATE, STRING, joint_state, string, type_hash
from onboard.loop.recorder import Published, read_recording, subscribe_every
from onboard.testing.fleet_rig import free_port

zenoh = pytest.importorskip("zenoh")
xxhash = pytest.importorskip("xxhash")
typesys = pytest.importorskip("rosbags.typesys")

from onboard.fleet.ros2 import QOS, Ros2Bridge  # noqa: E402  (needs the ros2 extra)

#: std_msgs/msg/String's hash as ros2/rmw_zenoh's docs/design.md shows it (the chatter key)
STRING_HASH = "RIHS01_df668c740482bbd48fb39d76a70dfd4bd59db1288021743503259e948f6b1a18"
STORE = typesys.get_typestore(typesys.Stores.ROS2_JAZZY)
MISSION = """\
name = "watched"

[[steps]]
name = "hand"
skill = "tidy"
goal = "hand me the blue block"
timeout = 300
"""


class Listener:
    """The test's Zenoh session: every sample under ``<domain>/**`` with its attachment, and
    the liveliness tokens under ``@ros2_lv/<domain>/**`` alive now."""

    def __init__(self, bus: Bus, domain: int) -> None:
        self.samples: list[tuple[str, bytes, bytes | None]] = []
        self.tokens: set[str] = set()
        #: every token ever declared
        self.declared: set[str] = set()
        self._lock = threading.Lock()
        session = bus.session
        self._subs = [
            session.declare_subscriber(f"{domain}/**", self._sample),
            session.liveliness().declare_subscriber(f"@ros2_lv/{domain}/**", self._token,
                                                    history=True),
        ]  # fmt: skip

    def _sample(self, sample: Any) -> None:
        extra = None if sample.attachment is None else sample.attachment.to_bytes()
        with self._lock:
            self.samples.append((str(sample.key_expr), sample.payload.to_bytes(), extra))

    def _token(self, sample: Any) -> None:
        with self._lock:
            if sample.kind == zenoh.SampleKind.PUT:
                self.tokens.add(str(sample.key_expr))
                self.declared.add(str(sample.key_expr))
            else:
                self.tokens.discard(str(sample.key_expr))

    def on(self, key: str) -> list[tuple[bytes, bytes | None]]:
        with self._lock:
            return [(data, extra) for k, data, extra in self.samples if k == key]

    def close(self) -> None:
        for sub in self._subs:
            sub.undeclare()


@pytest.fixture
def router() -> Any:
    """A Zenoh session listening on a loopback port, as a ROS 2 machine's router would."""
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    with open_bus(listen=[endpoint]) as bus:
        yield endpoint, bus


def test_the_type_hashes_are_rep_2011s() -> None:
    assert type_hash(STRING.name) == STRING.hash == STRING_HASH
    for ros_type in (JOINT_STATE, STRING):
        assert ros_type.hash == STORE.hash_rihs01(ros_type.name)
    assert JOINT_STATE.dds_name == "sensor_msgs::msg::dds_::JointState_"
    assert STRING.dds_name == "std_msgs::msg::dds_::String_"


@pytest.mark.parametrize(
    ("names", "positions"),
    [([], []), (["joint1"], [0.5]), (["a", "épaule", "ccc"], [-1.0, 2.5e-7, 3.14159])],
)
def test_the_messages_are_the_bytes_ros_2_serializes(names: list[str],
                                                     positions: list[float]) -> None:  # fmt: skip
    types = STORE.types
    ns = 1_796_462_249_137_000_001
    message = types["sensor_msgs/msg/JointState"](
        header=types["std_msgs/msg/Header"](
            stamp=types["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
            frame_id=""),
        name=names, position=np.array(positions, dtype=np.float64),
        velocity=np.array([], dtype=np.float64), effort=np.array([], dtype=np.float64),
    )  # fmt: skip
    ours = joint_state(ns, names, positions)
    assert ours[:4] == b"\x00\x01\x00\x00"
    assert ours == bytes(STORE.serialize_cdr(message, JOINT_STATE.name))
    text = types["std_msgs/msg/String"](data="pick — the blue block")
    assert string(text.data) == bytes(STORE.serialize_cdr(text, STRING.name))


def test_up_publishes_an_episodes_joint_and_skill_states_as_rmw_zenoh_does(
    tmp_path: Path, router: tuple[str, Bus]
) -> None:
    endpoint, bus = router
    robot = up_robot_copy(tmp_path)
    mission = tmp_path / "watched.toml"
    mission.write_text(MISSION, encoding="utf-8")
    domain = 7
    listener = Listener(bus, domain)
    began = time.time_ns()
    with Ros2Bridge(endpoint, domain=domain) as bridge:
        assert until(lambda: listener.tokens == set(bridge.tokens)), listener.tokens
        assert until(bridge.matched), "the bridge's publishers never matched the listener"
        with subscribe_every(bridge.episode):
            code = main(["--robot", str(robot), "up", "--once", "--mission", str(mission),
                         "--llm", "standin", "--clock", "virtual"])  # fmt: skip
        assert code == 0
        (recording,) = (tmp_path / "recordings").glob("*.jsonl")
        records = list(read_recording(recording))
        arms = [r for r in records if r["kind"] == "arm"]
        dests = [r["dest"] for r in records if r["kind"] == "transition"]
        joints_key = (f"{domain}/joint_states/sensor_msgs::msg::dds_::JointState_/"
                      f"{STORE.hash_rihs01(JOINT_STATE.name)}")  # fmt: skip
        state_key = f"{domain}/onboard/skill_state/std_msgs::msg::dds_::String_/{STRING_HASH}"
        assert until(lambda: len(listener.on(joints_key)) == len(arms))
        assert until(lambda: len(listener.on(state_key)) == len(dests))
        tokens = bridge.tokens
        zid = bridge.zid
    ended = time.time_ns()
    assert until(lambda: not listener.tokens), "the tokens are undeclared on close"
    listener.close()

    # the episode: an arm that moved and a skill that went through its states
    assert len(arms) >= 2 and dests[0] == "look" and dests[-1] == "done"

    # the liveliness tokens: a node /onboard and its two publishers, as rmw_zenoh makes them
    prefix = f"@ros2_lv/{domain}/{zid}/0"
    assert tokens == [
        f"{prefix}/0/NN/%/%/onboard",
        f"{prefix}/1/MP/%/%/onboard/%joint_states/sensor_msgs::msg::dds_::JointState_/"
        f"{JOINT_STATE.hash}/{QOS}",
        f"{prefix}/2/MP/%/%/onboard/%onboard%skill_state/std_msgs::msg::dds_::String_/"
        f"{STRING_HASH}/{QOS}",
    ]

    def check_attachments(samples: list[tuple[bytes, bytes | None]], token: str) -> None:
        digest = xxhash.xxh3_128_intdigest(token.encode("utf-8"))
        gid = [*(digest & (2**64 - 1)).to_bytes(8, "little"), *(digest >> 64).to_bytes(8, "little")]
        for n, (_, extra) in enumerate(samples, start=1):
            assert extra is not None, "rmw_zenoh drops a sample without an attachment"
            sequence, source_ns, source_gid = zenoh.ext.z_deserialize(
                tuple[zenoh.ext.Int64, zenoh.ext.Int64, list[zenoh.ext.UInt8]],
                zenoh.ZBytes(extra))  # fmt: skip
            assert (sequence, source_gid) == (n, gid)
            assert began <= source_ns <= ended

    # /joint_states: each arm record's joints, stamped with its wall time
    joint_samples = listener.on(joints_key)
    check_attachments(joint_samples, tokens[1])
    for (data, _), record in zip(joint_samples, arms, strict=True):
        message = STORE.deserialize_cdr(data, JOINT_STATE.name)
        stamp = message.header.stamp
        assert stamp.sec * 10**9 + stamp.nanosec == round(record["wall"] * 1e9)
        assert message.name == [f"joint{i + 1}" for i in range(len(record["joints"]))]
        assert message.position.tolist() == record["joints"] and len(record["joints"]) == 7
        assert message.velocity.size == message.effort.size == 0

    # /onboard/skill_state: the skill's states in order
    state_samples = listener.on(state_key)
    check_attachments(state_samples, tokens[2])
    assert [STORE.deserialize_cdr(d, STRING.name).data for d, _ in state_samples] == dests


@pytest.mark.parametrize("where", ["flags", "robot.toml"])
def test_up_ros2_joins_the_ros_graph_while_it_runs_and_leaves_it(
    where: str, tmp_path: Path, router: tuple[str, Bus], capsys: pytest.CaptureFixture[str]
) -> None:
    """``onboard up --check --ros2`` (or robot.toml's ``[service] ros2``, as a service under
    systemd has it): the node joins the ROS graph while ``up`` runs (the checks here) and
    leaves it when ``up`` exits."""
    endpoint, bus = router
    listener = Listener(bus, 3)
    flags = where == "flags"
    robot = up_robot_copy(tmp_path, "" if flags else f'ros2 = "{endpoint}"\nros2_domain = 3\n')
    more = ["--ros2", endpoint, "--ros2-domain", "3"] if flags else []
    code = main(["--robot", str(robot), "up", "--check", *more])
    out = capsys.readouterr().out
    assert code == 0
    assert f"onboard: ROS 2 (rmw_zenoh, domain 3) to {endpoint}: /joint_states, " in out
    assert until(lambda: len(listener.declared) == 3 and not listener.tokens), listener.declared
    assert {t.split("/")[5] for t in listener.declared} == {"NN", "MP"}
    listener.close()


def test_a_bad_ros2_endpoint_in_robot_toml_is_one_line_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    robot = up_robot_copy(tmp_path, 'ros2 = "udp/127.0.0.1:7447"\n')
    line = robot.read_text(encoding="utf-8").count("\n")  # the key's, the file's last
    assert main(["--robot", str(robot), "up", "--check"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"onboard: error: {robot}:{line}: [service.ros2] Value error, endpoint "
        "'udp/127.0.0.1:7447': a Zenoh endpoint is tcp/HOST:PORT (tcp/127.0.0.1:7447)"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--ros2", "udp/127.0.0.1:7447"],
         "endpoint 'udp/127.0.0.1:7447': a Zenoh endpoint is tcp/HOST:PORT (tcp/127.0.0.1:7447)"),
        (["--ros2", "tcp/127.0.0.1:7447", "--ros2-domain", "300"],
         "--ros2-domain 300: a ROS domain id is 0 to 232"),
    ],
)  # fmt: skip
def test_a_bad_ros2_option_is_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["up", "--check", *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"onboard: error: {line}"


def test_without_the_extra_up_ros2_names_it() -> None:
    """A child interpreter where ``zenoh`` cannot be imported: one line, exit 2."""
    done = cli_without("zenoh", ["up", "--check", "--ros2", "tcp/127.0.0.1:7447"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "onboard: error: the ROS 2 bridge needs Zenoh: pip install 'onboard[ros2]' "
        "(the ros2 extra: eclipse-zenoh, xxhash)"
    )


def test_a_record_without_joints_publishes_nothing(router: tuple[str, Bus]) -> None:
    endpoint, bus = router
    listener = Listener(bus, 0)
    with Ros2Bridge(endpoint) as bridge:
        assert until(bridge.matched)
        broken = [{"kind": "arm", "joints": "broken"}, {"kind": "arm"},
                  {"kind": "transition", "dest": None}]  # fmt: skip
        for record in [*broken, {"kind": "arm", "joints": [0.5]}]:
            bridge.publish(Published({"seq": 0, "t": 0.0, "wall": 1.5, **record},
                                     json.dumps(record), ()))  # fmt: skip
        assert until(lambda: len(listener.samples) == 1)
    ((key, data, _),) = listener.samples
    assert key.startswith("0/joint_states/")
    assert STORE.deserialize_cdr(data, JOINT_STATE.name).position.tolist() == [0.5]
    listener.close()
