"""The fleet's wire (docs/fleet.md): key expressions, version-1 payloads read back or refused
in one line naming the key, endpoints checked, and the ``fleet`` extra named when Zenoh is
not installed."""

from __future__ import annotations

import pytest
from waits import cli_without

from onboard.base.errors import UsageError
from onboard.fleet.bus import check_endpoint
from onboard.fleet.wire import (
    Action,
    BadPayload,
    Heartbeat,
    Result,
    State,
    check_name,
    decode,
    encode,
    key,
)

KEY = "onboard/v1/f/Bob/action"


def test_key_expressions() -> None:
    assert key("f", "Bob", "action") == KEY
    assert key("f", "coordinator", "heartbeat") == "onboard/v1/f/coordinator/heartbeat"
    assert key("f", "*", "result") == "onboard/v1/f/*/result"
    for bad in ("a/b", "a*", "", "x y"):
        with pytest.raises(UsageError, match="letters, digits"):
            check_name(bad, "--fleet")


@pytest.mark.parametrize(
    "payload",
    [
        Heartbeat(sender="Bob", sent=1.5, seq=3, period=0.1, latched=True),
        State(sender="Bob", sent=1.5, status="stopped", reason="why", pose=(0, 0, 0.1, 3.1, 0, 0)),
        Action(
            sender="coordinator",
            sent=2.0,
            id=7,
            command="act",
            action="PICK blue_square PLACE panel3",
            cubes={"blue_square": (0.3, 0.4, 0.02)},
        ),
        Result(
            sender="Bob",
            sent=2.5,
            id=7,
            ok=True,
            placed={"blue_square": (0.3, 0.4, 0.02)},
            received=2.1,
            seconds=0.4,
        ),
    ],
)
def test_each_payload_round_trips_with_its_version_and_kind(payload: object) -> None:
    data = encode(payload)  # type: ignore[arg-type]
    assert b'"v":1' in data and f'"kind":"{payload.kind}"'.encode() in data  # type: ignore[attr-defined]
    assert decode(type(payload), data, KEY) == payload  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b'{"v": 2, "sender": "c", "sent": 1, "id": 0, "command": "act"}',
         f"{KEY}: payload version 2, this reader reads v1"),
        (b"\x00garbled{", f"{KEY}: payload: Invalid JSON"),
        (b'{"v": 1, "sender": "c", "sent": 1, "id": 0, "command": "dance"}',
         f"{KEY}: command: Input should be 'act', 'stop' or 'reset'"),
        (b'{"v": 1, "sender": "c", "sent": 1, "id": 0, "command": "act", "speed": 9}',
         f"{KEY}: speed: Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_a_bad_payload_is_one_line_naming_the_key(data: bytes, line: str) -> None:
    with pytest.raises(BadPayload) as caught:
        decode(Action, data, KEY)
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


def test_endpoints_are_tcp_host_port() -> None:
    assert check_endpoint("tcp/127.0.0.1:7447") == "tcp/127.0.0.1:7447"
    for bad in ("udp/127.0.0.1:7447", "tcp/127.0.0.1", "127.0.0.1:7447", "tcp/:1", "tcp/h:65536"):
        with pytest.raises(UsageError, match="tcp/HOST:PORT"):
            check_endpoint(bad)


def test_without_the_extra_the_command_names_it() -> None:
    """A child interpreter where ``zenoh`` cannot be imported: one line, exit 2."""
    done = cli_without("zenoh", ["fleet", "reset", "Bob", "--listen", "tcp/127.0.0.1:47448"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "onboard: error: a fleet needs Zenoh: pip install -e '.[fleet]' (eclipse-zenoh)"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["controller", "Bob", "--arm", "127.0.0.1:1:2", "--timeout", "0.1"],
         "--period 0.1 --timeout 0.1: the period must be above 0 and the timeout at least two"),
        (["controller", "Bob", "--arm", "127.0.0.1:10001"],
         "--arm '127.0.0.1:10001': expected HOST:PORT:PORT"),
        (["controller", "coordinator", "--arm", "127.0.0.1:1:2"],
         "agent 'coordinator': the coordinator's name in key expressions"),
        (["run", "sweep_floor", "--truth", "127.0.0.1:9"],
         "task 'sweep_floor': a fleet runs sort_cubes only"),
        (["reset", "Bob", "--fleet", "a/b"], "--fleet 'a/b': letters, digits, _ and - only"),
    ],
)  # fmt: skip
def test_a_bad_command_line_is_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from onboard.cli.main import main

    assert main(["fleet", *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"onboard: error: {line}")
