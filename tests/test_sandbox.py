"""The sandbox for generated code: the allow-list check, the child process and its limits, the
endings (steps, memory, cpu, wall, api, error, signal) and ``onboard code check``.

Real child processes and real pipes throughout. The robot API here is a few plain functions
(the API is not the thing under test); a call that must block waits on an Event that
``on_abort`` sets, so no test sleeps. The CPU and memory bombs cannot finish in any time or
space: CPU time runs out (1 s) or the allocation is far past the 256 MB address-space limit,
on any machine.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from onboard.base.errors import CodeError, CodeRefused
from onboard.cli.code_check import check_command
from onboard.cli.main import main
from onboard.replan.allowlist import ALLOWED_BUILTINS
from onboard.replan.names import API_NAMES
from onboard.replan.sandbox import OUTPUT_CHARS, CodeRun, Limits, RunResult, check, run

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = sorted((ROOT / "tests" / "data" / "code" / "hostile").glob("*.py"))
EXPECT = re.compile(r"# expect: (refused|steps|memory|cpu|wall|error)\n")
ONBOARD = Path(sys.executable).parent / "onboard"


class Robot:
    """A test API: answers at once, except ``wait`` and ``block``, which hold the call until the
    run is aborted (as an arm motion ends when the arm is stopped)."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.entered = threading.Event()
        self.stops = 0

    def stop(self) -> None:
        self.stops += 1
        self.stopped.set()

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
        if name in ("wait", "block"):
            self.entered.set()
            self.stopped.wait()
            return None
        if name == "echo":
            return args[0] if args else kwargs
        if name == "fail":
            raise CodeError(f"fail({', '.join(map(repr, args))}): nothing seen")
        if name == "detect":
            return ["apple", "red block"]
        return None


def limits_for(expect: str) -> Limits:
    """Limits under which only the expected one can end the program: the others are set well
    apart from what reaching it takes (a memory bomb's allocations spent over 1 s of CPU on a
    loaded machine, so a 1 s CPU limit raced the memory limit)."""
    if expect == "wall":
        return Limits(wall_seconds=0.5)
    if expect == "cpu":
        return Limits(cpu_seconds=1, wall_seconds=60)  # cpu always ends before wall
    return Limits(cpu_seconds=30, wall_seconds=120)


def run_with(source: str, robot: Robot, api: tuple[str, ...], limits: Limits) -> RunResult:
    return run(source, api, robot.call, limits, on_abort=robot.stop)


TEST_API = ("echo", "fail", "block", "detect")


# the hostile corpus


def test_the_hostile_corpus_covers_the_issue() -> None:
    names = {path.stem for path in HOSTILE}
    for needed in ("import_os", "dunder_class_bases", "getattr_computed", "type_three_args",
                   "generator_frame", "str_format_attribute", "while_true", "range_huge",
                   "list_bomb", "str_bomb", "cpu_bomb_power", "recursion_deep", "open_read",
                   "socket_connect", "shadow_api", "print_flood", "eval_string",
                   "import_dunder", "wait_forever"):  # fmt: skip
        assert needed in names, needed
    assert len(HOSTILE) >= 40


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: p.stem)
def test_a_hostile_program_is_refused_or_ended_with_its_reason(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = path.read_text(encoding="utf-8")
    found = EXPECT.match(source)
    assert found, f"{path.name}: the first line must be '# expect: ...'"
    expect = found.group(1)
    refusals = check(source, API_NAMES)
    if expect == "refused":
        assert refusals, f"{path.name} was accepted"
        lines = source.count("\n") + 1
        assert all(1 <= r.line <= lines and r.reason for r in refusals)
        assert check_command(path) == 1
        printed = capsys.readouterr().out.splitlines()
        assert printed and all(line.startswith(f"{path}:") for line in printed)
        assert all(": refused: " in line for line in printed)
        with pytest.raises(CodeRefused):  # run() checks again, whoever checked before
            run(source, API_NAMES, Robot().call)
        return
    assert refusals == [], refusals
    robot = Robot()
    result = run_with(source, robot, API_NAMES, limits_for(expect))
    assert (result.ok, result.reason) == (False, expect), result.message
    assert robot.stops == 1
    assert len(result.output) < OUTPUT_CHARS + 100


def test_a_print_flood_keeps_only_the_capped_output() -> None:
    source = (HOSTILE[0].parent / "print_flood.py").read_text(encoding="utf-8")
    result = run_with(source, Robot(), API_NAMES, Limits())
    assert result.reason == "steps"
    assert result.output.startswith("x" * 10_000 + "\n")
    assert result.output.endswith(f"[output truncated at {OUTPUT_CHARS} characters]\n")


# the check


BENIGN = [
    """
names = detect()
food = [n for n in names if any(w in n for w in ("apple", "banana", "bread"))]
if food:
    pick(food[0])
    give_me()
else:
    print("nothing to eat among", ", ".join(names))
""",
    """
def tower(order):
    for below, above in zip(order, order[1:]):
        pick(above)
        place(below)
    return len(order)

stack = {"bottom": "blue block", "top": "red block"}
tower([stack["bottom"], stack.get("top", "")])
x, y, z = where("red block")
move_to(x, y, z + 0.1)
for _ in range(3):
    if wait_until_at("apple", 0.5, 0.1, within=0.03, timeout=5):
        break
    wait(0.5)
""",
    """
seen = sorted(detect(), key=lambda n: where(n)[1])
pairs = {name: i for i, name in enumerate(seen)}
first, *rest = seen
total = sum(abs(p) for p in where(first)) + max(1, min(2, round(3.4)))
print(f"{first!r} at {total:.2f}", isinstance(total, float), str(int(float("2"))))
open_drawer()
close_drawer(name="drawer")
home()
""",
]


@pytest.mark.parametrize("source", BENIGN, ids=["give", "stack", "misc"])
def test_benign_programs_are_accepted(source: str) -> None:
    assert check(source, API_NAMES) == []


def test_refusals_name_their_line_and_reason() -> None:
    source = "x = detect()\nimport os\nwhile x:\n    x = x.__class__\n"
    refusals = check(source, API_NAMES)
    assert [r.line for r in refusals] == [2, 3, 4]
    assert "import" in refusals[0].reason
    assert "for ... in range(N)" in refusals[1].reason
    assert "__class__" in refusals[2].reason


def test_every_api_name_may_be_called_but_not_rebound() -> None:
    for name in API_NAMES:
        assert check(f"{name}()\n", API_NAMES) == []
        assert check(f"{name} = 1\n", API_NAMES), name
        assert check(f"def f({name}):\n    return 1\n", API_NAMES), name
    for name in ALLOWED_BUILTINS:
        assert check(f"{name} = 1\n", API_NAMES), name


@pytest.mark.parametrize(
    "source",
    ["-" * 100_000 + "1", "x = 1\ny = x" + "[0]" * 100_000, "(" * 300 + ")" * 300, "x = 1\0"],
    ids=["unary", "subscripts", "parentheses", "nul"],
)
def test_source_that_breaks_the_parser_is_one_refusal(source: str) -> None:
    refusals = check(source, API_NAMES)
    assert len(refusals) == 1


def test_a_program_too_long_is_refused() -> None:
    assert "characters long" in check("x = 1\n" * 20_000, API_NAMES)[0].reason


def test_run_refuses_what_the_check_refuses() -> None:
    with pytest.raises(CodeRefused) as refused:
        run("import os\n", TEST_API, Robot().call)
    assert refused.value.problems == [
        "line 1: refused: import is not allowed: the program reaches the robot only through"
        " the API functions, which need no import"
    ]


# the mechanism


def test_values_round_trip_through_the_pipe() -> None:
    value = {"name": "apple ü", "at": [0.4, -0.125, 1e-9], "n": 2**70, "held": None, "ok": True}
    robot = Robot()
    source = f"got = echo({value!r})\necho(got)\necho(name=got['name'], where=(1, 2))\n"
    result = run_with(source, robot, TEST_API, Limits())
    assert result.ok and result.reason is None and result.message == ""
    assert result.calls == [
        ("echo", [value], {}),
        ("echo", [value], {}),
        ("echo", [], {"name": "apple ü", "where": [1, 2]}),
    ]
    assert robot.stops == 0
    assert result.steps == 3  # three API calls


def test_an_api_error_ends_the_run_with_its_message() -> None:
    robot = Robot()
    result = run_with("echo(1)\nfail('apple')\necho(2)\n", robot, TEST_API, Limits())
    assert (result.ok, result.reason) == (False, "api")
    assert result.message == "line 2: fail('apple'): nothing seen"
    assert [name for name, _, _ in result.calls] == ["echo", "fail"]
    assert robot.stops == 1


def test_an_error_in_the_program_names_its_type_message_and_line() -> None:
    result = run_with("x = 1\ny = {}\nz = y['missing']\n", Robot(), TEST_API, Limits())
    assert (result.reason, result.message) == ("error", "line 3: KeyError: 'missing'")


def test_an_argument_that_cannot_cross_the_pipe_is_an_error_of_the_program() -> None:
    result = run_with("echo(1)\necho({1, 2})\n", Robot(), TEST_API, Limits())
    assert result.reason == "error"
    assert result.message.startswith("line 2: TypeError: echo(): its arguments must be plain")


def test_a_return_value_that_cannot_cross_the_pipe_ends_the_run_as_api() -> None:
    robot = Robot()
    result = run("echo(1)\n", TEST_API, lambda n, a, k: object(), on_abort=robot.stop)
    assert result.reason == "api" and "cannot cross the pipe" in result.message
    assert robot.stops == 1


COUNTED = """
for i in range(5):
    pass
def f():
    return 1
f()
f()
f()
squares = [i * i for i in range(4)]
order = sorted([3, 1, 2], key=lambda v: -v)
echo(1)
echo(2)
"""
COUNTED_STEPS = 5 + 3 + 4 + 3 + 2  # loop bodies, function bodies, iterations, lambdas, calls


def test_the_step_budget_counts_loops_functions_comprehensions_and_calls() -> None:
    result = run_with(COUNTED, Robot(), TEST_API, Limits())
    assert result.ok and result.steps == COUNTED_STEPS


def test_a_spent_step_budget_ends_the_run_at_its_line() -> None:
    robot = Robot()
    limits = Limits(steps=COUNTED_STEPS - 1)
    result = run_with(COUNTED, robot, TEST_API, limits)
    assert (result.reason, result.steps) == ("steps", COUNTED_STEPS - 1)
    assert result.message == f"line 12: the step budget of {COUNTED_STEPS - 1} steps is spent"
    assert [c[1] for c in result.calls] == [[1]]  # the second call was the step too many
    assert robot.stops == 1


def test_the_wall_limit_fires_while_a_call_blocks() -> None:
    robot = Robot()  # 2 s: the child is far inside block() by then, on a loaded machine too
    result = run_with("echo(1)\nblock()\necho(2)\n", robot, TEST_API, Limits(wall_seconds=2))
    assert (result.reason, result.message) == ("wall", "past the wall-time limit of 2 s")
    assert robot.entered.is_set() and robot.stops == 1
    assert [name for name, _, _ in result.calls] == ["echo", "block"]


def test_abort_from_another_thread_ends_a_blocked_call() -> None:
    robot = Robot()
    code_run = CodeRun("block()\necho(1)\n", TEST_API, robot.call, on_abort=robot.stop)

    def stop_when_blocked() -> None:
        robot.entered.wait()
        code_run.abort("signal", "SIGTERM")

    stopper = threading.Thread(target=stop_when_blocked)
    stopper.start()
    result = code_run.run()
    stopper.join()
    assert (result.reason, result.message) == ("signal", "SIGTERM")
    assert robot.stops == 1
    code_run.abort()  # after the end: nothing more happens
    assert robot.stops == 1


class PollingRobot(Robot):
    """Its blocking call waits in slices, as an arm's motion loop does: CPython runs a signal's
    handler in the main thread between bytecodes, so a main thread asleep in one C call with
    no timeout (a bare Event.wait()) that the signal missed by a hair would not run it."""

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
        self.entered.set()
        while not self.stopped.wait(0.05):
            pass
        return None


def test_abort_from_a_signal_handler_ends_a_blocked_call() -> None:
    """The handler runs in the main thread inside the blocked call, perhaps inside the
    Event.wait whose lock on_abort's Event.set needs: abort() must not call on_abort there."""
    robot = PollingRobot()
    code_run = CodeRun("block()\n", TEST_API, robot.call, on_abort=robot.stop)
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: code_run.abort())

    ran = threading.Event()

    def send() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # the main thread takes it
        # the call, or the run's end without it (then the assert below says how it ended)
        while not robot.entered.wait(0.05):
            if ran.is_set():
                return
        os.kill(os.getpid(), signal.SIGUSR1)

    try:
        sender = threading.Thread(target=send)
        sender.start()
        try:
            result = code_run.run()
        finally:
            ran.set()
            sender.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert (result.reason, robot.stops) == ("signal", 1), result


def test_abort_before_the_run_starts_no_child() -> None:
    robot = Robot()
    code_run = CodeRun("echo(1)\n", TEST_API, robot.call, on_abort=robot.stop)
    code_run.abort("signal", "stopped early")
    code_run.abort("signal", "again")
    result = code_run.run()
    assert (result.reason, result.message, code_run.pid) == ("signal", "stopped early", None)
    assert result.calls == [] and robot.stops == 1


def test_a_run_to_its_end_never_calls_on_abort() -> None:
    robot = Robot()
    result = run_with("print('hello', 3, sep='-')\nprint([1])\n", robot, TEST_API, Limits())
    assert (result.ok, result.output, robot.stops) == (True, "hello-3\n[1]\n", 0)


def test_on_abort_failing_is_raised_after_the_child_is_gone() -> None:
    def broken_stop() -> None:
        raise CodeError("the arm did not stop")

    code_run = CodeRun("fail()\n", TEST_API, Robot().call, on_abort=broken_stop)
    with pytest.raises(CodeError, match="the arm did not stop"):
        code_run.run()
    assert code_run.pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(code_run.pid, 0)


def test_the_child_runs_inside_its_limits() -> None:
    """While the child waits for a call, its limits and namespaces are read from /proc."""
    seen: dict[str, str] = {}
    code_run: CodeRun

    def probe(name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
        pid = code_run.pid
        seen["limits"] = Path(f"/proc/{pid}/limits").read_text()
        seen["net"] = os.readlink(f"/proc/{pid}/ns/net")
        seen["fds"] = " ".join(sorted(os.listdir(f"/proc/{pid}/fd")))
        seen["uid"] = Path(f"/proc/{pid}/status").read_text().split("\nUid:")[1].split()[0]
        return None

    code_run = CodeRun("echo(1)\n", TEST_API, probe, Limits(memory_mb=200, cpu_seconds=3))
    result = code_run.run()
    assert result.ok, result.message
    limits = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(r"^Max ([a-z ]+?)\s{2,}(\S+)\s+(\S+)", seen["limits"], re.M)
    }
    assert limits["open files"] == ("0", "0")
    assert limits["processes"] == ("0", "0")
    assert limits["file size"] == ("0", "0")
    assert limits["core file size"] == ("0", "0")
    assert limits["cpu time"] == ("3", "4")
    assert limits["address space"] == (str(200 * 2**20),) * 2
    assert seen["fds"] == "0 1 2"  # the pipes, and nothing else
    if "network namespace (no interfaces up)" in result.isolation:
        assert seen["net"] != os.readlink("/proc/self/ns/net")
    else:
        assert any(item.startswith("no network namespace") for item in result.isolation)
    assert "RLIMIT_NOFILE 0" in result.isolation
    if os.getuid() == 0:  # root is exempt from RLIMIT_NPROC: the child is nobody
        assert seen["uid"] == "65534" and "uid 65534 (root dropped)" in result.isolation
    else:
        assert seen["uid"] == str(os.getuid())


# the command


def test_onboard_code_check_on_a_good_and_a_bad_file(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text(BENIGN[0], encoding="utf-8")
    bad = tmp_path / "bad.py"
    bad.write_text("names = detect()\nprint(names.__class__)\nimport os\n", encoding="utf-8")
    done = subprocess.run([ONBOARD, "code", "check", good], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, f"{good}: accepted\n")
    done = subprocess.run([ONBOARD, "code", "check", bad], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{bad}:2: refused: `__class__`: names starting with _ are not allowed (dunders, private)",
        f"{bad}:3: refused: import is not allowed: the program reaches the robot only through"
        " the API functions, which need no import",
    ]


def test_onboard_code_check_on_an_unreadable_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.py"
    assert main(["code", "check", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"onboard: error: {missing}: cannot be read (No such file or directory)\n"
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"x = '\xe9'\n")
    assert main(["code", "check", str(latin)]) == 2
    assert capsys.readouterr().err.startswith(f"onboard: error: {latin}: cannot be read (")


def test_an_exception_escaping_the_api_kills_the_child_and_stops_at_once() -> None:
    """A bug in the parent's call (not an OnboardError) propagates, after the stop."""
    robot = Robot()

    def buggy(name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
        raise KeyError("a bug")

    code_run = CodeRun("echo(1)\n", TEST_API, buggy, on_abort=robot.stop)
    with pytest.raises(KeyError):
        code_run.run()
    assert robot.stops == 1 and code_run.pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(code_run.pid, 0)
