"""The sandbox for generated robot code: a program is checked against the allow-list
(``allowlist.py``), then runs in a child process (``child.py``) inside resource limits, and
reaches the robot only through the API calls it sends over a pipe to this, its parent.

A run ends early with a named reason: ``steps`` (the budget the child counts), ``memory``,
``cpu`` (the child's resource limits), ``wall`` (a watchdog thread here), ``api`` (a call
failed), ``error`` (any other exception in the program) or ``signal`` (:meth:`CodeRun.abort`
from another thread or a signal handler). Every early end kills the child and calls
``on_abort`` exactly once, whichever thread ends it first: for the robot, it stops the arm,
which also ends a motion an API call may be blocked in.
"""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from onboard.base.errors import CodeRefused, OnboardError
from onboard.replan.allowlist import ALLOWED_BUILTINS, Refusal, check

__all__ = ["CodeRun", "Limits", "Refusal", "RunResult", "check", "run"]

CHILD = Path(__file__).with_name("child.py")
RECURSION = 100  # nested calls a program may make
OUTPUT_CHARS = 65_536  # print()ed text kept; the rest is dropped
MAX_MESSAGE = 1 << 20  # one line from the child; a longer one ends the run
REASONS = ("steps", "memory", "cpu", "wall", "api", "error", "signal")

_ASYNC_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                  signal.SIGUSR2, signal.SIGALRM}  # fmt: skip

Call = Callable[[str, list[Any], dict[str, Any]], object]


@dataclass(frozen=True)
class Limits:
    steps: int = 10_000
    memory_mb: int = 256
    cpu_seconds: float = 10.0
    wall_seconds: float = 600.0

    def __post_init__(self) -> None:
        for name in ("steps", "memory_mb", "cpu_seconds", "wall_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be positive, not {getattr(self, name)}")


@dataclass(frozen=True)
class RunResult:
    ok: bool
    reason: str | None  # None when ok, else one of REASONS (CodeAborted's reason)
    message: str  # "line N: ..." where the program's line is known
    steps: int
    calls: list[tuple[str, list[Any], dict[str, Any]]]
    output: str  # print()ed text, at most OUTPUT_CHARS
    isolation: tuple[str, ...] = field(default=())  # what the child applied (its "ready")


def run(
    source: str,
    api: Sequence[str],
    call: Call,
    limits: Limits = Limits(),
    on_abort: Callable[[], None] = lambda: None,
) -> RunResult:
    """Checks ``source`` (a refusal raises :class:`CodeRefused`) and runs it to its end."""
    return CodeRun(source, api, call, limits, on_abort).run()


class CodeRun:
    """One run of a program; :meth:`abort` may be called from any thread or a signal handler,
    before or during :meth:`run`."""

    def __init__(
        self,
        source: str,
        api: Sequence[str],
        call: Call,
        limits: Limits = Limits(),
        on_abort: Callable[[], None] = lambda: None,
    ) -> None:
        refusals = check(source, api)  # again: whatever checked it before, this runs it
        if refusals:
            raise CodeRefused([f"line {r.line}: refused: {r.reason}" for r in refusals])
        self.source = source
        self.api = tuple(api)
        self.limits = limits
        self._call = call
        self._on_abort = on_abort
        self._claim = threading.Lock()  # taken once, never released: who ends the run
        self._finished = threading.Event()
        self._requests: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()  # abort()s
        self._settled = threading.Event()  # the ending (and on_abort) is complete
        self._end = ("error", "the run did not end")
        self._abort_error: BaseException | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._steps = 0
        self._calls: list[tuple[str, list[Any], dict[str, Any]]] = []
        self._output: list[str] = []
        self._output_chars = 0
        self._isolation: tuple[str, ...] = ()
        self._stderr = bytearray()

    @property
    def pid(self) -> int | None:
        """The child's process id once it started."""
        return None if self._proc is None else self._proc.pid

    def abort(self, reason: str = "signal", message: str = "stopped from outside") -> None:
        """Ends the run: at once, the watchdog thread kills the child and calls ``on_abort``
        (once in all), while :meth:`run` may be blocked in a call. Safe from a signal handler:
        it only puts the request on a ``SimpleQueue``, so ``on_abort`` never runs inside the
        handler, where it could wait on a lock the interrupted code holds. Before :meth:`run`,
        the run ends as soon as it starts; after its end, nothing happens.

        CPython runs a signal's handler in the main thread, between bytecodes: a main thread
        asleep in one C call with no timeout, that the signal just missed, runs it only when
        that call returns. ``call`` should wait in slices (an arm's motion loop does)."""
        if reason not in REASONS:
            raise ValueError(f"abort(reason={reason!r}): one of {', '.join(REASONS)}")
        self._requests.put((reason, message))

    def run(self) -> RunResult:
        """Runs the program to its end; returns how it ended. Re-raises what ``on_abort``
        raised, or an exception other than :class:`OnboardError` from ``call``."""
        try:
            if not self._requests.empty():
                self._finish(*self._requests.get())
            else:
                self._start()
                self._serve()
        except BaseException as exc:  # ^C, a bug: the child must not outlive it, nor the arm move
            reason = "signal" if isinstance(exc, KeyboardInterrupt) else "error"
            self._finish(reason, f"the run was interrupted ({type(exc).__name__})")
            raise
        finally:
            self._reap()
        self._settled.wait()  # another thread's on_abort may still run
        if self._abort_error is not None:
            raise self._abort_error
        reason, message = self._end
        output = "".join(self._output)
        return RunResult(
            ok=reason == "ok",
            reason=None if reason == "ok" else reason,
            message=message,
            steps=self._steps,
            calls=list(self._calls),
            output=output,
            isolation=self._isolation,
        )

    # the ending

    def _finish(self, reason: str, message: str) -> bool:
        if not self._claim.acquire(blocking=False):
            return False
        self._end = (reason, message)
        self._finished.set()
        self._requests.put(("", ""))  # wakes the watchdog: nothing left to watch
        self._kill()
        try:
            if reason != "ok":
                self._on_abort()
        except BaseException as exc:  # re-raised by run(), on the thread that waits for it
            self._abort_error = exc
        finally:
            self._settled.set()
        return True

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.kill()

    # the child

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            env={},
            start_new_session=True,  # a terminal's ^C reaches the parent, which decides
        )
        assert self._proc.stderr is not None
        self._watchdog = threading.Thread(target=self._watch, name="sandbox-wall", daemon=True)
        self._drainer = threading.Thread(
            target=self._drain, args=(self._proc.stderr,), name="sandbox-stderr", daemon=True
        )
        # the threads start with these signals blocked, so the kernel hands a SIGTERM to a
        # thread that runs Python's handlers (the main one), not to one asleep in a read
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNC_SIGNALS)
        try:
            self._watchdog.start()
            self._drainer.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        job = {
            "source": self.source,
            "api": list(self.api),
            "builtins": list(ALLOWED_BUILTINS),
            "limits": {
                "steps": self.limits.steps,
                "memory_mb": self.limits.memory_mb,
                "cpu_seconds": self.limits.cpu_seconds,
                "recursion": RECURSION,
                "output_chars": OUTPUT_CHARS,
            },
        }
        self._send(job)

    def _watch(self) -> None:
        """Ends the run at the wall-time limit, or when abort() asks (the queue wakes it)."""
        try:
            reason, message = self._requests.get(timeout=self.limits.wall_seconds)
        except queue.Empty:
            reason, message = "wall", f"past the wall-time limit of {self.limits.wall_seconds:g} s"
        if reason:
            self._finish(reason, message)

    def _drain(self, stream: IO[bytes]) -> None:
        for chunk in iter(lambda: stream.read(4096), b""):
            self._stderr += chunk
            del self._stderr[:-4096]

    def _send(self, message: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(message).encode() + b"\n")
            self._proc.stdin.flush()
        except OSError:  # the child is gone; its end is read from stdout and its status
            pass

    def _serve(self) -> None:
        """Reads the child's messages until its end, answering its API calls."""
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        while not self._finished.is_set():
            line = stdout.readline(MAX_MESSAGE)
            if not line:
                return
            if not line.endswith(b"\n"):
                self._finish("error", f"the program sent a message over {MAX_MESSAGE} bytes")
                return
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                self._finish("error", "the sandbox's child sent something that is not a message")
                return
            self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        if isinstance(message.get("steps"), int):
            self._steps = max(self._steps, min(message["steps"], self.limits.steps))
        if "call" in message:
            self._serve_call(message)
        elif isinstance(message.get("print"), str):
            self._print(message["print"])
        elif message.get("truncated") is True:
            self._print_truncated()
        elif isinstance(message.get("ready"), list):
            self._isolation = tuple(str(item) for item in message["ready"])
        elif message.get("end") == "ok":
            self._finish("ok", "")
        elif message.get("end") in REASONS:
            self._finish(str(message["end"]), f"{message.get('message', '')!s:.500}")
        else:
            self._finish("error", f"the sandbox's child sent an unknown message: {message!r:.80}")

    def _serve_call(self, message: dict[str, Any]) -> None:
        name, args, kwargs = message.get("call"), message.get("args"), message.get("kwargs")
        if name not in self.api or not isinstance(args, list) or not isinstance(kwargs, dict):
            self._finish("error", f"the sandbox's child asked for {name!r:.40}: not an API call")
            return
        line = message.get("line")
        where = f"line {line}: " if isinstance(line, int) else ""
        self._calls.append((name, args, kwargs))
        try:
            value = self._call(name, args, kwargs)
        except OnboardError as exc:
            self._finish("api", f"{where}{exc}")
            return
        except BaseException:
            self._finish("error", f"{where}{name}() failed inside onboard")
            raise
        if self._finished.is_set():  # the run ended while the call ran (wall, abort)
            return
        try:
            self._send({"value": value})
        except (TypeError, ValueError):
            self._finish("api", f"{where}{name}() returned a {type(value).__name__}, which"
                         " cannot cross the pipe (plain values only)")  # fmt: skip

    def _print(self, text: str) -> None:
        room = OUTPUT_CHARS - self._output_chars
        if room > 0:
            self._output.append(text[:room])
            self._output_chars += min(len(text), room)
            if len(text) > room:
                self._print_truncated()

    def _print_truncated(self) -> None:
        if self._output_chars <= OUTPUT_CHARS:
            self._output.append(f"\n[output truncated at {OUTPUT_CHARS} characters]\n")
            self._output_chars = OUTPUT_CHARS + 1

    def _reap(self) -> None:
        proc = self._proc
        if proc is None:
            self._finish("signal", "stopped before it started")
            self._settled.wait()
            return
        try:
            proc.wait(timeout=5.0)  # it sent its end or was killed: it exits at once
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._drainer.join()  # the child is gone, so its stderr is at its end
        self._finish(*self._death(proc.returncode))  # no-op when the run has its end already
        self._watchdog.join()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):  # stdin: the child left some unread
                    stream.close()

    def _death(self, returncode: int) -> tuple[str, str]:
        """Why a child that sent no end exited: the CPU limit's signals, or memory."""
        if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
            return "cpu", f"past the CPU-time limit of {self.limits.cpu_seconds:g} s"
        text = self._stderr.decode(errors="replace")
        if "MemoryError" in text or "memory" in text.lower():
            limit = self.limits.memory_mb
            return "memory", f"out of memory (the address-space limit is {limit} MB)"
        last = text.strip().splitlines()[-1] if text.strip() else "no message"
        return "error", f"the sandbox's child exited ({returncode}): {last:.200}"
