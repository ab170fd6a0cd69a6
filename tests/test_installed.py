"""Runs when installed: the wheel in a fresh venv, used from an empty folder.

The wheel (built as in test_packaging.py) goes into a new venv with ``pip install --no-deps
--no-index``. Its third-party packages come from this (the dev) venv: a ``.pth`` file in the
new venv's site-packages holds the dev venv's site-packages path as a plain line, so Python
appends that folder to ``sys.path`` without processing the ``.pth`` files in it, and the
editable install's finder (which maps ``onboard`` onto the checkout) never runs. Every
command runs in an empty folder with only the new venv's ``bin`` first on PATH and no
PYTHONPATH: nothing of the checkout is reachable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_packaging import build_wheel

from onboard.bundled import DETECTOR_DIR_ENV
from onboard.cli.main import NO_ROBOT

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Venv:
    path: Path
    site_packages: Path
    env: dict[str, str]

    def run(self, *args: str, cwd: Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), cwd=cwd, env=self.env, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    def onboard(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.path / "bin" / "onboard"), *args, cwd=cwd)

    def python(self, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.path / "bin" / "python"), "-c", code, cwd=cwd)


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    tmp = tmp_path_factory.mktemp("installed")
    wheel = build_wheel(tmp)
    path = tmp / "venv"
    _ok(subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)],
                       capture_output=True, text=True, timeout=60, check=False))  # fmt: skip
    python = path / "bin" / "python"
    _ok(subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=120, check=False,
    ))  # fmt: skip
    purelib = _ok(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, timeout=30, check=False,
    )).stdout.strip()  # fmt: skip
    dev = sysconfig.get_paths()["purelib"]
    Path(purelib, "dev-venv.pth").write_text(dev + "\n", encoding="utf-8")
    # the wheel's own files are the subject: no detector folder named by the caller (gate.py)
    unset = ("PYTHONPATH", "VIRTUAL_ENV", DETECTOR_DIR_ENV)
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PATH"] = os.pathsep.join([str(path / "bin"), env.get("PATH", "")])
    return Venv(path, Path(purelib), env)


def test_only_onboard_is_installed(venv: Venv, tmp_path: Path) -> None:
    installed = sorted(p.name for p in venv.site_packages.iterdir())
    assert installed == ["dev-venv.pth", "onboard", "onboard-0.1.0.dist-info"]
    for folder in ("runtime", "drivers"):
        done = venv.python(f"import {folder}", tmp_path)
        assert done.returncode != 0 and f"No module named '{folder}'" in done.stderr
    done = _ok(venv.python(
        "import onboard, sys\n"
        "from onboard import bundled\n"
        "print(onboard.__file__)\n"
        "print(bundled.skills_dir())\n"
        "print(bundled.embedder_dir())\n"
        "print(bundled.detector_dir())\n"
        "print(bundled.example_robot())\n"
        "print(any('__editable__' in type(f).__module__ for f in sys.meta_path))\n",
        tmp_path,
    ))  # fmt: skip
    *paths, editable = done.stdout.splitlines()
    for path in paths:
        assert Path(path).is_relative_to(venv.path), path
        assert not Path(path).is_relative_to(ROOT), path
    assert editable == "False"


def test_check_runs_the_bundled_example(venv: Venv, tmp_path: Path) -> None:
    done = _ok(venv.onboard("check", cwd=tmp_path))
    assert done.stderr == NO_ROBOT + "\n"
    example = venv.site_packages / "onboard" / "example-robot.toml"
    assert done.stdout.startswith(f"{example}: robot 'example'")
    assert f"({venv.site_packages / 'onboard' / 'skills' / 'engage.toml'})" in done.stdout
    assert "skill engage: 6 actions" in done.stdout and "\n  4 scenarios" in done.stdout
    assert "\n  9 held-out scenarios: heldout-coat-exit, " in done.stdout
    assert done.stdout.splitlines()[-1] == "ok"


def test_eval_runs_the_shipped_and_the_held_out_scenarios(venv: Venv, tmp_path: Path) -> None:
    done = _ok(venv.onboard("eval", "engage", "--trials", "1", "--json", cwd=tmp_path))
    report = json.loads(done.stdout)
    assert report["groups"]["shipped"]["trials"] == 4
    assert report["groups"]["held-out"]["trials"] == 9


def test_run_engage_with_the_standin(venv: Venv, tmp_path: Path) -> None:
    done = venv.onboard("run", "engage", "--llm", "standin", "--clock", "virtual", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "onboard: engage on person-object" in done.stdout
    assert "success: spoke at" in done.stdout
    (recording,) = (tmp_path / "recordings").glob("engage-person-object-*.jsonl")
    assert f"recorded: {recording}" in done.stdout


def test_init_writes_a_robot_that_checks(venv: Venv, tmp_path: Path) -> None:
    done = _ok(venv.onboard("init", "robot1", cwd=tmp_path))
    assert done.stdout.splitlines()[-1] == (
        "next: cd robot1 && onboard check && onboard run engage --llm standin"
    )
    checked = _ok(venv.onboard("--robot", "robot1/robot.toml", "check", cwd=tmp_path))
    assert checked.stderr == "" and checked.stdout.startswith("robot1/robot.toml: robot 'robot1'")
    assert f"({tmp_path / 'robot1' / 'skills' / 'engage.toml'})" in checked.stdout
    assert "\n  9 held-out scenarios: " in checked.stdout
    again = venv.onboard("init", "robot1", cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.splitlines() == [
        "onboard: error: robot1/robot.toml: exists already: onboard init --force overwrites it"
    ]
