"""The control API and the operator page (FastAPI on uvicorn, in a thread of its own).

Bound to robot.toml's ``[service] host`` (127.0.0.1 by default). Beyond loopback every
request needs the token from the variable ``[service] token_env`` names: ``Authorization:
Bearer TOKEN``, or the page's cookie (opening the page as ``/?token=TOKEN`` sets it); without the
variable set, the API refuses to start. A POST also needs the header ``X-Onboard: 1``,
which a page of another site cannot send without the browser asking first (CORS), so a
page open in the operator's browser cannot reset the e-stop behind their back.

The e-stop's route is ``async``: it runs on uvicorn's own thread, never on the service's
loop (a step blocks that loop), and calls ``stop()`` on every connected arm before it
answers. Every other control is posted onto the loop (:class:`~onboard.service.service.Service`).
"""

# no `from __future__ import annotations`: FastAPI reads the routes' annotations, whose
# names (Request) are imported inside make_app
import hmac
import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onboard.base.errors import ConfigError, OnboardError, Problem
from onboard.perception.latest import LATEST
from onboard.service.heartbeat import Heartbeats
from onboard.service.mission import check_mission, mission_files
from onboard.service.settings import ServiceConfig, is_loopback

if TYPE_CHECKING:
    from fastapi import FastAPI

    from onboard.service.service import Service

__all__ = ["ApiServer", "episode_view", "make_app", "require_token"]

INSTALL = "pip install 'onboard[service]' (the service extra: fastapi, uvicorn)"
PAGE = Path(__file__).with_name("page.html")
COOKIE = "onboard_token"
#: how much of the running step's recording the page's view reads (from its end)
TAIL = 256 * 1024


def require_token(settings: ServiceConfig, where: Path) -> str | None:
    """The token the API needs: None on loopback, else the variable's value (a ConfigError
    naming robot.toml's ``[service]`` when it is unset)."""
    if is_loopback(settings.host):
        return None
    token = os.environ.get(settings.token_env, "")
    if not token:
        why = (
            f"host = {settings.host!r} is beyond loopback: the control API needs a token; "
            f"set the variable {settings.token_env} (or bind host = '127.0.0.1')"
        )
        raise ConfigError([Problem(where, "service.host", None, why)])
    return token


def make_app(service: "Service", token: str | None, beats: Heartbeats | None = None) -> "FastAPI":
    try:
        from fastapi import Depends, FastAPI, HTTPException, Request
        from fastapi.responses import HTMLResponse, JSONResponse, Response
    except ImportError as exc:
        raise ImportError(f"the control API needs fastapi and uvicorn: {INSTALL}") from exc

    def authorised(request: Request) -> None:
        if request.method == "POST" and request.headers.get("x-onboard") != "1":
            raise HTTPException(403, "a control request needs the header X-Onboard: 1")
        if token is None:
            return
        given = request.cookies.get(COOKIE, "")
        if request.url.path == "/" and "token" in request.query_params:
            given = request.query_params["token"]  # the page, opened once as /?token=...
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            given = header[7:].strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(401, "the token is missing or wrong")

    app = FastAPI(title="onboard", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(authorised)])  # fmt: skip
    robot = service.robot

    @app.exception_handler(HTTPException)
    async def refused(_request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request) -> Response:
        response = HTMLResponse(PAGE.read_text(encoding="utf-8"))
        if token is not None:
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return response

    @app.get("/api/status")
    def status() -> dict[str, Any]:
        return status_of(service, beats)

    @app.get("/api/frame")
    def frame() -> Response:
        latest = LATEST.jpeg()
        if latest is None:
            raise HTTPException(404, "no look yet")
        index, jpeg = latest
        headers = {"X-Onboard-Look": str(index), "Cache-Control": "no-store"}
        return Response(jpeg, media_type="image/jpeg", headers=headers)

    @app.get("/api/episodes")
    def episodes(limit: int = 20) -> list[dict[str, Any]]:
        return list(reversed(list(service.recent)))[: max(0, limit)]

    @app.get("/api/missions")
    def missions() -> list[str]:
        return [path.stem for path in mission_files(robot)]

    @app.post("/api/missions/{name}")
    def queue(name: str) -> dict[str, Any]:
        found = {path.stem: path for path in mission_files(robot)}
        if name not in found:
            raise HTTPException(404, f"no mission {name!r} in {robot.skills_dir / 'missions'}")
        try:
            mission = check_mission(robot, found[name], hardware=True)
        except OnboardError as exc:
            raise HTTPException(422, str(exc)) from exc
        service.enqueue(mission)
        return {"queued": mission.name}

    @app.post("/api/cancel")
    def cancel() -> dict[str, Any]:
        service.cancel()
        return {"cancelled": service.mission.name if service.mission else None}

    @app.post("/api/pause")
    def pause() -> dict[str, Any]:
        service.pause()
        return {"paused": True}

    @app.post("/api/resume")
    def resume() -> dict[str, Any]:
        service.resume()
        return {"paused": False}

    @app.post("/api/operator/{action}")
    def decide(action: str) -> dict[str, Any]:
        if action not in ("retry", "skip", "abort"):
            raise HTTPException(404, f"no decision {action!r} (retry, skip or abort)")
        waiting = service.waiting
        if not service.decide(action):  # type: ignore[arg-type]
            raise HTTPException(409, "no step waits for the operator")
        assert waiting is not None
        run, index, _, why = waiting
        return {"decided": action, "mission": run.name, "step": run.mission.steps[index].name,
                "why": why}  # fmt: skip

    @app.post("/api/estop")
    async def estop(request: Request) -> dict[str, Any]:
        source = "page" if request.headers.get("x-onboard-from") == "page" else "api"
        service.estop.trigger(source)  # this thread, before the answer
        return service.estop.status()

    @app.post("/api/reset")
    def reset() -> dict[str, Any]:
        return {"reset": service.estop.reset("api"), **service.estop.status()}

    return app


def status_of(service: "Service", beats: Heartbeats | None) -> dict[str, Any]:
    current = dict(service.current) if service.current else None
    path = None
    if current is not None and service._in_step:
        path = _recording(current)
    elif service.recent and service.recent[-1]["recording"]:  # the last step's, once ended
        path = Path(service.recent[-1]["recording"])
    view = episode_view(path) if path is not None and path.is_file() else None
    return {
        "robot": service.robot.name,
        "time": time.time(),
        "mission": service.mission.name if service.mission else None,
        "step": current,
        "in_step": service._in_step,
        "paused": service.paused,
        "operator": _waiting(service),
        "look": LATEST.about(),
        "queue": service.queued(),
        "estop": service.estop.status(),
        "heartbeats": beats.status() if beats is not None else None,
        "episode": view,
        "failed_steps": service.failed_steps,
    }


def _waiting(service: "Service") -> dict[str, Any] | None:
    """The step held for the operator's decision, if one is."""
    waiting = service.waiting
    if waiting is None:
        return None
    run, index, attempt, why = waiting
    return {"mission": run.name, "run": run.id, "step": run.mission.steps[index].name,
            "attempt": attempt, "why": why, "decisions": ["retry", "skip", "abort"]}  # fmt: skip


def _recording(current: dict[str, Any]) -> Path | None:
    """The running step's recording, once its episode has begun writing it."""
    path = Path(current["recording"]) if current.get("recording") else None
    return path if path is not None and path.exists() else None


def episode_view(path: Path) -> dict[str, Any]:
    """:func:`read_view`, read again only when the recording has grown (the page polls)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _LAST_LOCK:
        if _LAST and _LAST[0] == key:
            cached: dict[str, Any] = _LAST[1]
            return cached
    view = read_view(path)
    with _LAST_LOCK:
        _LAST[:] = [key, view]
    return view


_LAST: list[Any] = []
_LAST_LOCK = threading.Lock()


def read_view(path: Path) -> dict[str, Any]:
    """What the page shows of an episode (the running step's, else the last one's), from
    the end of its recording (flushed per record): the skill's state, the last prompt and
    reply, the verifiers' and critics' scores, the last look's detections."""
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - TAIL))
        lines = file.read().decode("utf-8", "replace").splitlines()
    view: dict[str, Any] = {"recording": path.name, "state": None, "prompt": None,
                            "reply": None, "scores": [], "detections": None}  # fmt: skip
    for line in reversed(lines):
        if all(view[k] is not None for k in ("state", "prompt", "reply", "detections")):
            break  # the rest is older
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the first line of the tail, cut, or a line being written
        kind = record.get("kind") if isinstance(record, dict) else None
        if kind == "transition" and view["state"] is None:
            view["state"] = record.get("dest")
        elif kind == "request" and view["prompt"] is None:
            messages = record.get("messages") or [{}]
            view["prompt"] = str(messages[-1].get("content", ""))[-2000:]
        elif kind == "reply" and view["reply"] is None:
            view["reply"] = str(record.get("text", ""))[:2000]
        elif kind in ("verify", "check", "critic") and len(view["scores"]) < 6:
            name = record.get("verifier") or record.get("check") or record.get("critic") or kind
            view["scores"].append({"name": name, "score": record.get("score"),
                                   "ok": record.get("ok"), "t": record.get("t")})  # fmt: skip
        elif kind == "observation" and view["detections"] is None:
            view["detections"] = [
                {"label": o.get("label"), "score": o.get("score"), "box": o.get("box")}
                for o in record.get("objects", [])
                if isinstance(o, dict)
            ]
    return view


class ApiServer:
    """uvicorn serving ``app`` from a daemon thread; ``port`` once started (0 picks one)."""

    def __init__(self, app: "FastAPI", host: str, port: int) -> None:
        try:
            import uvicorn
        except ImportError as exc:
            raise ImportError(f"the control API needs fastapi and uvicorn: {INSTALL}") from exc
        # no access log: a page opened as /?token=... must not write the token anywhere
        config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                                lifespan="off", ws="none")  # fmt: skip
        self.server = uvicorn.Server(config)
        self.host, self.port = host, port
        self._thread: threading.Thread | None = None
        self._socket: Any = None

    def start(self, timeout: float = 10.0) -> None:
        import socket

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:  # bound here, so a port in use is an OSError naming it, not a log line
            listener.bind((self.host, self.port))
        except OSError:
            listener.close()
            raise
        self._socket = listener
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [listener]},
                                        name="control-api", daemon=True)  # fmt: skip
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise OSError(f"the control API did not start on {self.url}")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._socket is not None:
            self._socket.close()
