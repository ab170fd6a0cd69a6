"""``onboard code run`` and ``onboard code api`` as a user runs them: real child processes, the
real sandbox, the twin in the command's own process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from onboard.replan.api import api_doc

ROOT = Path(__file__).resolve().parent.parent
ONBOARD = Path(sys.executable).with_name("onboard")


def onboard(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [str(ONBOARD), "--robot", str(ROOT / "robot.toml")]
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_code_api_prints_the_generated_doc(tmp_path: Path) -> None:
    done = onboard("code", "api", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == api_doc()


def test_a_program_runs_on_the_twin_and_says_what_it_did(tmp_path: Path) -> None:
    program = tmp_path / "stack.py"
    program.write_text(
        'print(detect())\npick("red block")\nplace("blue block")\nprint(objects_on("blue block"))\n'
    )
    done = onboard("code", "run", str(program), "--scene", "blocks", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "call: pick('red block')" in done.stdout and "['red block']" in done.stdout
    assert "ran to its end; 4 steps, 4 API calls" in done.stdout


def test_a_refused_program_and_a_failed_call_end_with_exit_1(tmp_path: Path) -> None:
    program = tmp_path / "bad.py"
    program.write_text("detect()\nimport os\n")
    done = onboard("code", "run", str(program), cwd=tmp_path)
    assert done.returncode == 1 and done.stdout.startswith(f"{program}:2: refused: ")
    program.write_text('pick("apple")\n')
    done = onboard("code", "run", str(program), "--scene", "blocks", "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["reason"] == "api" and "pick('apple'): no apple seen" in result["message"]


def test_sigterm_during_a_run_stops_the_arm_and_exits_128_plus_15(tmp_path: Path) -> None:
    program = tmp_path / "slow.py"
    program.write_text(
        "for i in range(100):\n    move_to(0.45, 0.1, 0.3)\n    move_to(0.45, -0.1, 0.3)\n"
    )
    command = [str(ONBOARD), "--robot", str(ROOT / "robot.toml"),
               "code", "run", str(program), "--scene", "blocks"]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=tmp_path) as child:  # fmt: skip
        assert child.stdout is not None
        assert child.stdout.readline().startswith("onboard: running")
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM
    assert "ended early (signal)" in out


def test_robot_toml_can_require_a_confirmation_and_a_real_arm_asks_by_default(
    tmp_path: Path,
) -> None:
    from onboard.config import CodeConfig

    assert CodeConfig().confirm_on("jaka") and CodeConfig().confirm_on("marlin")
    assert not CodeConfig().confirm_on("sim") and CodeConfig(confirm=True).confirm_on("sim")
    text = (ROOT / "robot.toml").read_text().replace("# confirm = true", "confirm = true")
    assert "\nconfirm = true" in text
    robot = tmp_path / "robot.toml"
    robot.write_text(text.replace('skills = "skills"', f'skills = "{ROOT / "skills"}"'))
    program = tmp_path / "look.py"
    program.write_text("print(detect())\n")
    command = [str(ONBOARD), "--robot", str(robot), "code", "run", str(program)]
    declined = subprocess.run(command, input="n\n", capture_output=True, text=True, cwd=tmp_path,
                              timeout=600)  # fmt: skip
    assert declined.returncode == 1 and "[y/N]" in declined.stdout
    assert "not run (not confirmed)" in declined.stdout and "running" not in declined.stdout
    accepted = subprocess.run(command, input="y\n", capture_output=True, text=True, cwd=tmp_path,
                              timeout=600)  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr
    assert "running" in accepted.stdout and "block" in accepted.stdout


def test_a_program_past_its_step_budget_ends_with_the_reason_and_exit_1(tmp_path: Path) -> None:
    program = tmp_path / "spin.py"
    program.write_text("move_to(0.45, 0.1, 0.3)\nfor i in range(10**9):\n    pass\n")
    done = onboard("code", "run", str(program), "--scene", "blocks", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "ended early (steps)" in done.stdout
