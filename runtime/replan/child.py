"""The sandbox's child process: runs one checked program inside resource limits, reaching the
robot only through its parent.

Started by ``onboard.replan.sandbox`` as ``python -I -S child.py``: the standard library only,
nothing of onboard or site-packages, so it starts in milliseconds. JSON lines, one object each:

parent -> child
    ``{"source", "api", "builtins", "limits": {steps, memory_mb, cpu_seconds, recursion,
    output_chars}}`` once, then ``{"value": v}`` answering each call.
child -> parent
    ``{"ready": [what isolation applied]}``, ``{"print": text}`` (until the output cap, then
    ``{"truncated": true}`` once), ``{"call": name, "args", "kwargs", "steps", "line"}``, and
    last ``{"end": "ok" | "steps" | "memory" | "error", "message", "steps"}``.

A CPU limit or an address-space limit that kills the process outright sends nothing: the
parent reads the exit status. A failed API call is the parent's to end: it kills this process.
"""

from __future__ import annotations

import ast
import builtins
import ctypes
import json
import math
import os
import resource
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any

PROGRAM = "<program>"  # as allowlist.PROGRAM; this file imports nothing of onboard
STEP = "__onboard_step"  # no program can spell it: the check refuses names starting with _
NOBODY = 65534
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


class Ended(BaseException):
    """Ends the program from inside (not an Exception, though no program can catch anyway)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Budget(ast.NodeTransformer):
    """Inserts a call of the step counter at the top of every loop body, every function body
    (lambdas too) and every comprehension iteration; API calls count in their proxies."""

    @staticmethod
    def step(at: ast.AST) -> ast.expr:
        return ast.copy_location(ast.Call(ast.Name(STEP, ast.Load()), [], []), at)

    def visit_For(self, node: ast.For) -> ast.For:
        self.generic_visit(node)
        self.count_body(node.body)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        self.generic_visit(node)
        self.count_body(node.body)
        return node

    def count_body(self, body: list[ast.stmt]) -> None:
        """At the body's first line: a spent budget or a recursion names the line it ran."""
        body.insert(0, ast.copy_location(ast.Expr(self.step(body[0])), body[0]))

    def visit_Lambda(self, node: ast.Lambda) -> ast.Lambda:
        self.generic_visit(node)  # the counter answers True: `True and body` is body
        node.body = ast.copy_location(ast.BoolOp(ast.And(), [self.step(node), node.body]), node)
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.comprehension:
        self.generic_visit(node)
        node.ifs.insert(0, self.step(node.target))
        return node


class Counter:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.steps = 0

    def __call__(self) -> bool:
        self.steps += 1
        if self.steps > self.limit:
            raise Ended("steps", f"the step budget of {self.limit} steps is spent")
        return True


class Output:
    """``print`` for the program: text goes to the parent, up to a cap in characters."""

    def __init__(self, cap: int) -> None:
        self.left = cap

    def __call__(self, *values: object, sep: str | None = " ", end: str | None = "\n",
                 flush: bool = False) -> None:  # fmt: skip
        if self.left <= 0:
            return
        text = (" " if sep is None else str(sep)).join(map(str, values))
        text += "\n" if end is None else str(end)
        send({"print": text[: self.left]})
        self.left -= len(text)
        if self.left < 0:
            send({"truncated": True})


def proxy(name: str, count: Counter) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        count()
        try:
            line = json.dumps({"call": name, "args": list(args), "kwargs": kwargs,
                               "steps": count.steps, "line": program_line()})  # fmt: skip
        except (TypeError, ValueError):
            raise TypeError(f"{name}(): its arguments must be plain values (str, int, float,"
                            " bool, None, lists and dicts of them)") from None  # fmt: skip
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        answer = sys.stdin.readline()
        if not answer:
            raise Ended("signal", "the parent closed the pipe")
        return json.loads(answer)["value"]

    call.__name__ = name
    return call


def program_line(tb: TracebackType | None = None) -> int | None:
    """The program's line: the innermost of its frames in ``tb``, else the caller's."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == PROGRAM:
            line = tb.tb_lineno
        tb = tb.tb_next
    if line is None:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != PROGRAM:
            frame = frame.f_back  # type: ignore[assignment]
        line = frame.f_lineno if frame is not None else None
    return line


def drop_root() -> str:
    """Root is exempt from RLIMIT_NPROC (and more): a child started by root becomes nobody."""
    if os.getuid() != 0:
        return f"uid {os.getuid()}"
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    return f"uid {NOBODY} (root dropped)"


def unshare_network() -> str:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
            return "network namespace (no interfaces up)"
        return f"no network namespace (unshare: {os.strerror(ctypes.get_errno())})"
    except (AttributeError, OSError) as exc:  # not Linux
        return f"no network namespace ({exc})"


def set_limit(name: str, soft: int, hard: int | None = None) -> str:
    """Sets soft and hard limits (a program can never raise them), below an existing hard one."""
    kind = getattr(resource, name)
    _, ceiling = resource.getrlimit(kind)
    hard = soft if hard is None else hard
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    resource.setrlimit(kind, (soft, hard))
    return f"{name} {soft}"


def isolate(limits: dict[str, Any]) -> list[str]:
    """The network namespace where the machine allows it, then the resource limits. No new
    descriptor can open after RLIMIT_NOFILE 0: the pipes to the parent exist already."""
    applied = [drop_root(), unshare_network()]
    applied.append(set_limit("RLIMIT_CORE", 0))
    applied.append(set_limit("RLIMIT_FSIZE", 0))
    applied.append(set_limit("RLIMIT_NPROC", 0))
    applied.append(set_limit("RLIMIT_NOFILE", 0))
    cpu = math.ceil(limits["cpu_seconds"])  # SIGXCPU at the soft limit, SIGKILL a second later
    applied.append(set_limit("RLIMIT_CPU", cpu, cpu + 1))
    applied.append(set_limit("RLIMIT_AS", int(limits["memory_mb"]) * 2**20))
    return applied


def run(job: dict[str, Any]) -> dict[str, Any]:
    limits = job["limits"]
    tree = Budget().visit(ast.parse(job["source"], PROGRAM))
    code = compile(ast.fix_missing_locations(tree), PROGRAM, "exec", dont_inherit=True)
    count = Counter(int(limits["steps"]))
    allowed: dict[str, Any] = {n: getattr(builtins, n) for n in job["builtins"]}
    allowed["print"] = Output(int(limits["output_chars"]))
    namespace: dict[str, Any] = {"__builtins__": allowed, STEP: count}
    namespace.update({name: proxy(name, count) for name in job["api"]})
    try:
        send({"ready": isolate(limits)})
    except (OSError, ValueError) as exc:
        return {"end": "error", "message": f"the sandbox could not set its limits: {exc}"}
    sys.setrecursionlimit(_depth() + int(limits["recursion"]))
    try:
        exec(code, namespace)
        end = {"end": "ok", "message": ""}
    except Ended as exc:
        end = {"end": exc.reason, "message": where(exc) + exc.message}
    except MemoryError as exc:
        end = {"end": "memory", "message": where(exc) + "out of memory (the address-space"
               f" limit is {limits['memory_mb']} MB)"}  # fmt: skip
    except RecursionError as exc:
        end = {"end": "error", "message": where(exc) + "RecursionError: calls (or data)"
               f" nested more than {limits['recursion']} deep"}  # fmt: skip
    except Exception as exc:
        text = " ".join(str(exc).split())  # one line, and short: a KeyError may hold a novel
        end = {"end": "error", "message": where(exc) + f"{type(exc).__name__}: {text:.300}"}
    namespace.clear()  # frees what the program built before the end is reported
    return {**end, "steps": min(count.steps, count.limit)}


def where(exc: BaseException) -> str:
    line = program_line(exc.__traceback__)
    return "" if line is None else f"line {line}: "


def _depth() -> int:
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth


def main() -> int:
    job = json.loads(sys.stdin.readline())
    send(run(job))
    return 0


if __name__ == "__main__":
    sys.exit(main())
