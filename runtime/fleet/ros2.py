"""The robot's state for ROS 2 over Zenoh (the ``ros2`` extra): what a ROS 2 node on
rmw_zenoh_cpp receives from a publisher of its own kind (``onboard up --ros2 ENDPOINT``).

A recorder subscriber (:meth:`Ros2Bridge.episode`) turns records into two topics of a node
``/onboard``: each ``arm`` record (the arm's joints after a command) into a
``sensor_msgs/msg/JointState`` on ``/joint_states``, each ``transition`` record into the
skill's new state as a ``std_msgs/msg/String`` on ``/onboard/skill_state``. So a ROS 2 node
sees what the recording holds, never something else.

What rmw_zenoh_cpp (Jazzy, Rolling) puts on Zenoh, and this module too (docs/ros2.md):

- a sample on ``<domain>/<topic without its outer slashes>/<DDS type name>/<RIHS01 hash>``,
  its payload the CDR message (runtime/fleet/rosmsg.py), its attachment the sequence number
  (from 1, per publisher) and the source time (ns since the epoch), each a little-endian
  int64, then the publisher's 16-byte GID as Zenoh's serializer writes a byte array (its
  length as one LEB128 byte, 16, then the bytes);
- a liveliness token per entity for the ROS graph (``ros2 topic list``, ``ros2 node list``):
  ``@ros2_lv/<domain>/<zid>/<node id>/<entity id>/<NN|MP>/<enclave>/<namespace>/<node>``,
  a publisher's followed by ``/<topic>/<DDS type>/<hash>/<QoS>``, each name with its ``/``
  written ``%``; the GID is XXH3-128 of the publisher's token (low 64 bits, then high, each
  little endian).

The session is a Zenoh peer with scouting off that connects to the given endpoint: a ROS 2
machine's router (``ros2 run rmw_zenoh_cpp rmw_zenohd``, ``tcp/HOST:7447``) or any Zenoh
session listening there; it keeps retrying a lost link (runtime/fleet/bus.py). A sample is
put with congestion control ``drop``: a slow network never holds up the recorder.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from onboard.base.errors import MissingExtraError, UsageError
from onboard.fleet.bus import Bus, check_endpoint, open_bus
from onboard.fleet.rosmsg import JOINT_STATE, STRING, RosType, joint_state, string
from onboard.loop.foxglove import wall_ns
from onboard.loop.recorder import Published, Subscriber

__all__ = [
    "EXTRA",
    "JOINTS_TOPIC",
    "NODE",
    "QOS",
    "STATE_TOPIC",
    "Ros2Bridge",
    "attachment",
    "data_key",
    "joint_names",
]

log = logging.getLogger(__name__)

EXTRA = "pip install 'onboard[ros2]' (the ros2 extra: eclipse-zenoh, xxhash)"
NODE = "onboard"
JOINTS_TOPIC = "/joint_states"
STATE_TOPIC = "/onboard/skill_state"
#: rmw_zenoh's QoS key for reliable, volatile, keep last 10 (rclcpp's default publisher):
#: a field equal to rmw_zenoh's default is left empty, and its default depth is 42
QOS = "::,10:,:,:,,"
#: the ROS domain id's range (ROS_DOMAIN_ID)
DOMAINS = range(0, 233)


def _mangle(name: str) -> str:
    return name.replace("/", "%")


def data_key(domain: int, topic: str, ros_type: RosType) -> str:
    """The key expression a topic's samples go on."""
    return f"{domain}/{topic.strip('/')}/{ros_type.dds_name}/{ros_type.hash}"


def attachment(sequence: int, source_ns: int, gid: bytes) -> bytes:
    """rmw_zenoh's attachment: int64 sequence number, int64 source time, the 16-byte GID as
    a Zenoh-serialized array (LEB128 length, 16 fits one byte)."""
    if len(gid) != 16:
        raise ValueError(f"a GID is 16 bytes, not {len(gid)}")
    return sequence.to_bytes(8, "little", signed=True) + source_ns.to_bytes(
        8, "little", signed=True) + bytes([16]) + gid  # fmt: skip


def joint_names(count: int) -> list[str]:
    """The joints' names: ``joint1`` ... in the arm's own order (records carry no names)."""
    return [f"joint{i}" for i in range(1, count + 1)]


@dataclass
class _Publisher:
    key: str
    token_key: str
    gid: bytes
    zenoh: Any
    token: Any
    sequence: int = 1


class Ros2Bridge:
    """Publishes each recording's joint states and skill states as rmw_zenoh does, on a
    Zenoh session connected to ``endpoint``; :meth:`close` (or leaving a ``with``) ends it."""

    def __init__(self, endpoint: str, *, domain: int = 0) -> None:
        try:
            import xxhash
            import zenoh
        except ImportError as exc:
            raise MissingExtraError(f"the ROS 2 bridge needs Zenoh: {EXTRA}") from exc
        if domain not in DOMAINS:
            raise UsageError(f"--ros2-domain {domain}: a ROS domain id is 0 to 232")
        self.endpoint = check_endpoint(endpoint)
        self.domain = domain
        self._zenoh = zenoh
        self._xxh = xxhash.xxh3_128_intdigest
        self._lock = threading.Lock()
        self._bus: Bus = open_bus(connect=[self.endpoint])
        session = self._bus.session
        self.zid = str(session.zid())
        self._prefix = f"@ros2_lv/{domain}/{self.zid}/0"
        self.node_token = f"{self._prefix}/0/NN/%/%/{NODE}"
        self._tokens = [session.liveliness().declare_token(self.node_token)]
        self.joints = self._publisher(1, JOINTS_TOPIC, JOINT_STATE)
        self.states = self._publisher(2, STATE_TOPIC, STRING)
        self._closed = False

    def _publisher(self, entity: int, topic: str, ros_type: RosType) -> _Publisher:
        token_key = (f"{self._prefix}/{entity}/MP/%/%/{NODE}/{_mangle(topic)}/"
                     f"{_mangle(ros_type.dds_name)}/{ros_type.hash}/{QOS}")  # fmt: skip
        digest = self._xxh(token_key.encode("utf-8"))
        low, high = digest & (2**64 - 1), digest >> 64
        gid = low.to_bytes(8, "little") + high.to_bytes(8, "little")
        session = self._bus.session
        key = data_key(self.domain, topic, ros_type)
        publisher = session.declare_publisher(
            key, congestion_control=self._zenoh.CongestionControl.DROP,
            reliability=self._zenoh.Reliability.RELIABLE,
        )  # fmt: skip
        token = session.liveliness().declare_token(token_key)
        self._tokens.append(token)
        return _Publisher(key, token_key, gid, publisher, token)

    @property
    def tokens(self) -> list[str]:
        """The liveliness tokens' key expressions: the node's, then each publisher's."""
        return [self.node_token, self.joints.token_key, self.states.token_key]

    def matched(self) -> bool:
        """Whether a subscriber is known for each topic (a sample put before is lost, as a
        ROS 2 publisher's sample is for a subscriber that has not matched it yet)."""
        return all(p.zenoh.matching_status.matching for p in (self.joints, self.states))

    def episode(self) -> Subscriber:
        """A subscriber for one more recording (``subscribe_every(bridge.episode)``)."""
        return self.publish

    def publish(self, published: Published) -> None:
        """Put what ``published`` holds for ROS 2, if anything."""
        record = published.record
        kind = record.get("kind")
        if kind == "arm":
            joints = _joints(record.get("joints"))
            if joints:
                data = joint_state(wall_ns(record), joint_names(len(joints)), joints)
                self._put(self.joints, data)
        elif kind == "transition" and isinstance(record.get("dest"), str):
            self._put(self.states, string(record["dest"]))

    def _put(self, publisher: _Publisher, data: bytes) -> None:
        with self._lock:
            if self._closed:
                return
            sequence = publisher.sequence
            publisher.sequence += 1
            publisher.zenoh.put(data, attachment=attachment(sequence, time.time_ns(),
                                                            publisher.gid))  # fmt: skip

    def close(self) -> None:
        """Undeclare the tokens (the node leaves the ROS graph) and close the session."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for token in self._tokens:
            token.undeclare()
        for publisher in (self.joints, self.states):
            publisher.zenoh.undeclare()
        self._bus.close()

    def __enter__(self) -> Ros2Bridge:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _joints(value: object) -> list[float]:
    if not isinstance(value, Sequence) or isinstance(value, str | bytes | Mapping):
        return []
    try:
        return [float(q) for q in value]
    except (TypeError, ValueError):
        return []
