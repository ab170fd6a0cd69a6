"""The e-stop bypasses the service's loop: with the loop deliberately blocked, each input (an
HTTP request, a file's presence, a line on a real pty, a GPIO-style value file) stops the
twin's arm mid-motion from its own thread; the stop latches (motions refused, the runtime's
resume refused) until an explicit reset through the control API. SafeArm rate-limits motions.
The control API: its token beyond loopback, its controls, a mission queued and run.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_harness import serve_beside, until

from onboard import bundled
from onboard.base.errors import ArmError, ConfigError
from onboard.cli.main import main
from onboard.config import RobotConfig
from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.config import SimArmConfig
from onboard.drivers.arm.safety import STOP_LINE, SafeArm, SafetyLimits
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.twin.world import Twin
from onboard.service.api import ApiServer, episode_view, make_app, require_token
from onboard.service.log import JsonLog
from onboard.service.mission import check_mission
from onboard.service.notify import Notifier
from onboard.service.operator import operator
from onboard.service.service import Options, Service
from onboard.service.settings import ServiceConfig

ROOT = Path(__file__).resolve().parent.parent
CONTROL = {"X-Onboard": "1"}
#: a bound on every wait for an event (a loaded machine's worst case, not an expected time)
WAIT = 30.0


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin() as world:
        yield world


@pytest.fixture
def arm(twin: Twin) -> Iterator[SafeArm]:
    """The twin's arm, its motions in real time (a motion lasts long enough to stop it)."""
    safe = SafeArm(SimArm(twin, SimArmConfig(realtime=True)), SafetyLimits(), twin.forward)
    safe.connect()
    safe.home()
    yield safe
    STOP_LINE.release()
    safe.close()


def _service(tmp_path: Path, **settings: Any) -> tuple[Service, io.StringIO]:
    robot = RobotConfig(name="t", root=tmp_path, recordings=tmp_path / "rec",
                        skills=bundled.skills_dir(),
                        service=ServiceConfig(port=0, **settings))  # fmt: skip
    out = io.StringIO()
    service = Service(robot, [], Options(once=True, llm="standin", clock="virtual"),
                      JsonLog(out), Notifier(""))  # fmt: skip
    return service, out


def _with_loop_blocked(service: Service, action: Callable[[], None]) -> None:
    """Run ``service`` on this (the main) thread with its loop blocked by a callback, and
    ``action`` on another thread meanwhile; the loop is let go when ``action`` ends."""
    blocked, done = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def block() -> None:
        blocked.set()
        done.wait(WAIT * 4)

    def act() -> None:
        try:
            assert blocked.wait(WAIT)
            action()
        except BaseException as exc:
            failed.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=act)
    thread.start()
    service.run(ready=block)
    thread.join()
    if failed:
        raise failed[0]


def _moving(arm: SafeArm) -> tuple[threading.Thread, list[BaseException]]:
    """A long motion of the arm (0.3 m at 0.05 m/s), under way on a thread."""
    raised: list[BaseException] = []
    started = threading.Event()

    def move() -> None:
        started.set()
        try:
            arm.move_to(Pose(0.45, 0.3, 0.3, 3.14159, 0.0, 0.0), speed=0.05)
        except BaseException as exc:  # ArmError: stopped
            raised.append(exc)

    thread = threading.Thread(target=move)
    thread.start()
    assert started.wait(WAIT)
    return thread, raised


def _stopped_and_latched(arm: SafeArm, motion: threading.Thread, raised: list[BaseException],
                         url: str, source: str) -> None:  # fmt: skip
    motion.join(WAIT)
    assert not motion.is_alive() and raised, "the motion was not stopped"
    assert isinstance(raised[0], ArmError), raised
    assert arm.state().stopped
    with pytest.raises(ArmError):
        arm.move_to(Pose(0.4, 0.0, 0.3, 3.14159, 0.0, 0.0))
    with pytest.raises(ArmError, match="e-stop is engaged"):
        arm.resume()  # what the runtime does before each command it sends
    status = httpx.get(url + "/api/status", timeout=WAIT).json()
    assert status["estop"]["engaged"] and status["estop"]["source"] == source
    reset = httpx.post(url + "/api/reset", headers=CONTROL, timeout=WAIT).json()
    assert reset["reset"] is True and reset["engaged"] is False
    arm.resume()
    arm.move_to(Pose(0.4, 0.0, 0.35, 3.14159, 0.0, 0.0), speed=0.25)  # moves again
    assert [s.op for s in arm.sent][-4:] == ["move_to", "stop", "resume", "move_to"][-4:]


@pytest.mark.parametrize("source", ["api", "file", "serial", "gpio"])
def test_each_input_stops_the_arm_with_the_loop_blocked_and_latches_until_reset(
    tmp_path: Path, arm: SafeArm, source: str
) -> None:
    flag, gpio = tmp_path / "estop", tmp_path / "gpio-value"
    gpio.write_text("1\n")
    master, slave = os.openpty()
    settings = {"file": flag, "gpio": gpio, "serial": os.ttyname(slave), "word": "STOP"}
    service, out = _service(tmp_path, estop=settings)

    def press() -> None:
        if source == "api":
            httpx.post(url[0] + "/api/estop", headers=CONTROL, timeout=WAIT).raise_for_status()
        elif source == "file":
            flag.touch()
        elif source == "serial":
            os.write(master, b"noise\nSTOP\n")
        else:
            gpio.write_text("0\n")  # a normally-closed button: pressed pulls the line low

    def action() -> None:
        motion, raised = _moving(arm)
        press()
        _stopped_and_latched(arm, motion, raised, url[0], source)

    url: list[str] = []
    try:
        with operator(service, "standin", token=None) as api:
            assert api is not None
            url.append(api)
            _with_loop_blocked(service, action)
    finally:
        os.close(master)
        os.close(slave)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    estops = [e for e in events if e["event"] == "estop"]
    assert [e["source"] for e in estops] == [source] and estops[0]["arms"] >= 1
    assert "estop_reset" in [e["event"] for e in events]


def test_an_arm_connected_while_the_estop_is_engaged_starts_stopped(twin: Twin) -> None:
    STOP_LINE.engage("test")
    try:
        late = SafeArm(SimArm(twin), SafetyLimits(), twin.forward)
        late.connect()
        assert late.state().stopped
        with pytest.raises(ArmError):
            late.home()
    finally:
        STOP_LINE.release()
        late.close()


def test_motion_commands_are_rate_limited_in_safearm(twin: Twin) -> None:
    limits = SafetyLimits(max_motion_rate=20.0, motion_burst=2)
    arm = SafeArm(SimArm(twin), limits, twin.forward)
    arm.connect()
    try:
        for _ in range(5):
            arm.grip(False)
    finally:
        arm.close()
    notes = [s.clamped for s in arm.sent]
    assert notes[:2] == [(), ()]  # the burst
    assert all(n and n[-1].startswith("rate 20/s: waited") for n in notes[2:]), notes


def test_beyond_loopback_the_token_is_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = _non_loopback_address()
    service, _ = _service(tmp_path, host=host, token_env="ONBOARD_TEST_API_TOKEN")
    where = tmp_path / "robot.toml"
    monkeypatch.delenv("ONBOARD_TEST_API_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="ONBOARD_TEST_API_TOKEN"):
        require_token(service.robot.service, where)
    assert require_token(ServiceConfig(host="127.0.0.1"), where) is None
    monkeypatch.setenv("ONBOARD_TEST_API_TOKEN", "s3cret-token")
    token = require_token(service.robot.service, where)
    server = ApiServer(make_app(service, token), host, 0)
    server.start()
    try:
        url = server.url
        assert httpx.get(url + "/api/status", timeout=WAIT).status_code == 401
        bad = {"Authorization": "Bearer wrong"}
        assert httpx.get(url + "/api/status", headers=bad, timeout=WAIT).status_code == 401
        good = {"Authorization": "Bearer s3cret-token"}
        assert httpx.post(url + "/api/estop", headers=good, timeout=WAIT).status_code == 403
        assert service.estop.engaged is None  # no X-Onboard: nothing done
        assert httpx.get(url + "/api/status", headers=good, timeout=WAIT).json()["robot"] == "t"
        assert httpx.get(url + "/", timeout=WAIT).status_code == 401
        assert httpx.get(url + "/?token=wrong", timeout=WAIT).status_code == 401
        assert httpx.get(url + "/api/status?token=s3cret-token", timeout=WAIT).status_code == 401
        page = httpx.get(url + "/?token=s3cret-token", timeout=WAIT)  # sets the page's cookie
        assert page.status_code == 200 and "E-STOP" in page.text
        with httpx.Client(cookies=page.cookies, timeout=WAIT) as browser:
            assert browser.get(url + "/api/status").status_code == 200
            assert browser.post(url + "/api/estop").status_code == 403  # no X-Onboard
            assert browser.post(url + "/api/estop", headers=CONTROL).json()["engaged"] is True
        service.estop.reset("test")
    finally:
        server.close()


def _non_loopback_address() -> str:
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: the route's source address
        address = str(probe.getsockname()[0])
    except OSError:
        address = ""
    finally:
        probe.close()
    if not address or address.startswith("127."):
        pytest.skip("no non-loopback IPv4 address on this machine to bind the API to")
    return address


def test_the_api_queues_a_mission_pauses_resumes_cancels_and_lists_the_episode(
    tmp_path: Path,
) -> None:
    assert main(["init", str(tmp_path / "robot")]) == 0
    folder = tmp_path / "robot"
    (folder / "skills" / "missions").mkdir(exist_ok=True)
    (folder / "skills" / "missions" / "greet.toml").write_text(
        '[[steps]]\nname = "hello"\nskill = "engage"\nscenario = "person-object"\n'
    )
    robot = RobotConfig(name="t", root=folder, recordings=tmp_path / "rec",
                        skills=folder / "skills", service=ServiceConfig(port=0))  # fmt: skip
    out = io.StringIO()
    service = Service(robot, [], Options(once=False, llm="standin", clock="virtual"),
                      JsonLog(out), Notifier(""))  # fmt: skip

    def drive(url: str) -> None:
        def post(path: str) -> httpx.Response:
            return httpx.post(url + path, headers=CONTROL, timeout=WAIT)

        assert httpx.post(url + "/api/pause", timeout=WAIT).status_code == 403
        assert post("/api/pause").json() == {"paused": True}
        assert post("/api/missions/nothing").status_code == 404
        assert httpx.get(url + "/api/missions", timeout=WAIT).json() == ["greet"]
        assert post("/api/missions/greet").json() == {"queued": "greet"}
        held = until(url + "/api/status", lambda s: s["mission"] == "greet", "held step")
        assert held["step"]["step"] == "hello" and held["paused"] and not held["in_step"]
        assert post("/api/resume").json() == {"paused": False}
        episodes = until(url + "/api/episodes", lambda e: len(e) == 1, "the episode")
        assert episodes["items"][0]["verdict"] == "success"
        recording = Path(episodes["items"][0]["recording"])
        view = episode_view(recording)  # what the page shows of a running step
        assert view["state"] and view["prompt"] and view["reply"], view
        post("/api/pause")
        post("/api/missions/greet")
        until(url + "/api/status", lambda s: s["mission"] == "greet", "queued again")
        post("/api/cancel")
        until(url + "/api/status", lambda s: s["mission"] is None, "cancelled")

    serve_beside(service, drive)
    events = [json.loads(line)["event"] for line in out.getvalue().splitlines()]
    assert events.count("step_end") == 1 and events.count("mission_queued") == 2
    ends = [json.loads(x) for x in out.getvalue().splitlines() if '"mission_end"' in x]
    assert [e["result"] for e in ends] == ["done", "cancelled"]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_operator_page_shows_a_change_within_a_second_and_its_button_stops_the_twin(
    tmp_path: Path, arm: SafeArm
) -> None:
    """Headless Chromium (Debian's, driven by Playwright) on the page, the service's loop
    blocked: the e-stop engaged by its file shows within 1 s, and so does its reset; the
    page's button stops the twin's arm mid-motion. The screenshot is kept beside the test's
    files (pytest's tmp_path: the path is printed)."""
    assert CHROMIUM, "Debian's chromium is needed (tools/system-packages.sh installs it)"
    from playwright.sync_api import sync_playwright

    flag = tmp_path / "estop"
    service, _ = _service(tmp_path, estop={"file": flag})
    shot = tmp_path / "operator-page.png"

    def engaged(page: Any, text: str, timeout: float) -> None:
        page.wait_for_function(
            f"document.getElementById('estop-state').textContent === {json.dumps(text)}",
            timeout=timeout * 1000,
        )

    def action() -> None:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 800})
                page.goto(url[0])
                engaged(page, "released", WAIT)  # the page has shown a first status
                flag.touch()
                engaged(page, "ENGAGED (file)", 1.0)
                flag.unlink()
                httpx.post(url[0] + "/api/reset", headers=CONTROL, timeout=WAIT)
                engaged(page, "released", 1.0)
                arm.resume()
                motion, raised = _moving(arm)
                page.click("#estop")
                engaged(page, "ENGAGED (page)", WAIT)
                motion.join(WAIT)
                assert raised and isinstance(raised[0], ArmError), raised
                assert arm.state().stopped
                with pytest.raises(ArmError, match="e-stop is engaged"):
                    arm.resume()
                page.screenshot(path=str(shot), full_page=True)
                page.click("#reset")
                engaged(page, "released", WAIT)
            finally:
                browser.close()

    url: list[str] = []
    with operator(service, "standin", token=None) as api:
        assert api is not None
        url.append(api)
        _with_loop_blocked(service, action)
    assert shot.stat().st_size > 10_000
    print(f"operator page screenshot: {shot}")


#: the page's canvas holds a picture: many sampled pixels differ from its grey background
PAINTED = """() => {
  const c = document.getElementById('frame');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4 * 97) if (d[i] !== 0x33 || d[i + 1] !== 0x33) n++;
  return n > 200;
}"""


def test_the_operator_page_shows_the_steps_state_prompt_reply_scores_and_detections(
    tmp_path: Path,
) -> None:
    """A tidy step on the twin (the stand-in LLM, the virtual clock) queued through the
    service; the page then shows its mission, state, last prompt and reply, its checks'
    scores and the last look's detections, read from its recording, over the camera's last
    frame. A second screenshot."""
    assert CHROMIUM, "Debian's chromium is needed (tools/system-packages.sh installs it)"
    from playwright.sync_api import sync_playwright

    from onboard.config import load_robot

    robot = load_robot(ROOT / "robot.toml").model_copy(
        update={"recordings": tmp_path / "rec", "service": ServiceConfig(port=0)}
    )
    mission = tmp_path / "stack.toml"
    mission.write_text(
        '[[steps]]\nname = "stack"\nskill = "tidy"\ngoal = "put the red block on the blue block"\n'
    )
    service = Service(robot, [], Options(llm="standin", clock="virtual"),
                      JsonLog(io.StringIO()), Notifier(""))  # fmt: skip
    shot = tmp_path / "operator-page-step.png"
    failed: list[BaseException] = []

    def drive(url: str) -> None:
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                try:
                    page = browser.new_page(viewport={"width": 1100, "height": 900})
                    page.goto(url)
                    service.enqueue(check_mission(robot, mission, hardware=True))
                    page.wait_for_function(
                        "document.getElementById('state').textContent.includes('last step')",
                        timeout=WAIT * 4 * 1000,
                    )
                    assert page.text_content("#mission") == "–"  # the mission is over
                    assert "red block" in (page.text_content("#prompt") or "")
                    assert (page.text_content("#reply") or "–") != "–"
                    assert page.locator("#scores tr").count() > 1  # a header, then scores
                    assert "block" in (page.text_content("#detections") or "")
                    # the camera's last look, drawn under its boxes: not the bare background
                    page.wait_for_function(PAINTED, timeout=WAIT * 1000)
                    shown = httpx.get(url + "/api/frame", timeout=WAIT)
                    assert shown.headers["content-type"] == "image/jpeg"
                    assert shown.content[:2] == b"\xff\xd8" and len(shown.content) > 5_000
                    page.wait_for_function(
                        "document.querySelectorAll('#episodes tr').length > 1", timeout=WAIT * 1000
                    )
                    assert "success" in (page.text_content("#episodes") or "")
                    page.screenshot(path=str(shot), full_page=True)
                finally:
                    browser.close()
        except BaseException as exc:
            failed.append(exc)
        finally:
            service.clock.stop()

    with operator(service, "standin", token=None) as api:
        assert api is not None
        thread = threading.Thread(target=drive, args=(api,))
        thread.start()
        service.run()
        thread.join()
    if failed:
        raise failed[0]
    print(f"operator page screenshot: {shot}")


def test_a_loop_that_has_returned_is_not_late(tmp_path: Path) -> None:
    """After run() returns the beat ages while the process tears down (the twin, the API,
    the e-stop inputs): under load that took over LATE seconds, and "loop_late" was logged
    after "stopped". A loop that has ended no longer hangs."""
    from onboard.service.heartbeat import Heartbeats

    service, out = _service(tmp_path)
    beats = Heartbeats(service.log, lambda: service.loop_beat, lambda: service._in_step, None,
                       late=0.3, loop_ended=lambda: service.loop_ended)  # fmt: skip
    service.loop_beat -= 1.0  # a beat a second old, as after run() and a slow teardown
    assert beats.status()["loop"]["late"]
    service.clock.post(service.clock.stop)
    service.run()
    assert service.loop_ended
    service.loop_beat -= 1.0
    assert not beats.status()["loop"]["late"]
    assert [json.loads(x)["event"] for x in out.getvalue().splitlines()][-1] == "stopped"


def test_heartbeats_log_a_late_loop_and_an_llm_link_that_stops_answering(tmp_path: Path) -> None:
    """The loop's beat (a timer on the service's loop) stops while the loop is blocked, and
    the LLM link's probe (a real loopback HTTP server) fails once the server is gone: each
    is logged when it changes, and is in the status the page shows."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from onboard.service.heartbeat import Heartbeats

    class Models(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.end_headers()
            self.wfile.write(b'{"data": []}')

        def log_message(self, *args: Any) -> None:
            pass

    llm = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=llm.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{llm.server_address[1]}/v1"
    service, out = _service(tmp_path)
    beats = Heartbeats(service.log, lambda: service.loop_beat, lambda: service._in_step, url,
                       every=0.05, log_every=0.2, late=0.3)  # fmt: skip

    def logged(event: str) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for line in out.getvalue().splitlines():
                if json.loads(line)["event"] == event:
                    return dict(json.loads(line))
            time.sleep(0.02)
        raise AssertionError(f"never logged: {event}")

    def action() -> None:
        assert logged("llm_link_up")["url"] == url
        assert logged("loop_late")["age"] > 0.3  # the loop is blocked by _with_loop_blocked
        status = beats.status()
        assert status["loop"]["late"] and status["llm"]["ok"] is True
        llm.shutdown()
        llm.server_close()
        assert logged("llm_link_down")["error"]  # ConnectError, or the closing connection's
        assert beats.status()["llm"]["ok"] is False
        assert {"loop", "llm"} <= set(logged("heartbeat"))

    beats.start()
    try:
        _with_loop_blocked(service, action)
    finally:
        beats.close()
