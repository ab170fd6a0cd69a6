"""Gate a candidate detector on the tests that act on what the robot sees, shipped file untouched.

    python models/detector/gate.py /tmp/model.onnx          # the skill tests: 2 min on 2 cores
    python models/detector/gate.py /tmp/model.onnx --all    # the whole suite, as CI runs it
    python models/detector/gate.py /tmp/model.onnx -- -k tidy -x   # more pytest arguments

Run it with the interpreter the tests run with (``.venv/bin/python``, not the training one). It
copies the candidate and the shipped ``classes.json`` into a temporary folder, names that folder
in ``ONBOARD_DETECTOR_DIR`` (``onboard.bundled.detector_dir`` then loads it wherever onboard
loads the detector) and runs pytest on it in a child process. It prints the candidate's sha256
and exits with pytest's code: 0 means every test passed with the candidate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from onboard.base.digest import file_sha256
from onboard.bundled import DETECTOR_DIR_ENV

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: the tests whose robots act on the detector's boxes: the skills that stack, queue, open the
#: drawer and check their goal by looking, the dry run's perceived scenes (the tower), the
#: code skill that checks its programs by dry runs of the tower it sees, the baselines that
#: take the tower apart, and the detector's own scene tests
SKILL_TESTS = (
    "tests/test_tidy.py",
    "tests/test_robot_api.py",
    "tests/test_code_tasks.py",
    "tests/test_dryrun.py",
    "tests/test_code_skill.py",
    "tests/test_baselines.py",
    "tests/test_unknown.py",
    "tests/test_detector.py",
    "tests/test_pose.py",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="Arguments after -- go to pytest."
    )
    parser.add_argument("model", type=Path, help="the candidate model.onnx")
    parser.add_argument(
        "--classes",
        type=Path,
        default=HERE / "classes.json",
        help="its class names (default: the shipped ones)",
    )
    parser.add_argument(
        "--all", action="store_true", help="run the whole suite, not only the skill tests"
    )
    parser.add_argument(
        "--jobs", default="2", help="pytest-xdist workers (default 2; 0 runs in one process)"
    )
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:split]), argv[split + 1 :]
    for role, path in (("model", args.model), ("classes", args.classes)):
        if not path.is_file():
            print(f"gate: no {role} file {path}", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="detector-gate-") as folder:
        shutil.copyfile(args.model, Path(folder) / "model.onnx")
        shutil.copyfile(args.classes, Path(folder) / "classes.json")
        digest = file_sha256(args.model)[:8]
        print(f"gate: {args.model} (sha256 {digest}) in {DETECTOR_DIR_ENV}={folder}", flush=True)
        tests = ["tests"] if args.all else list(SKILL_TESTS)
        command = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:randomly", "-n", args.jobs]
        env = {**os.environ, DETECTOR_DIR_ENV: folder}
        result = subprocess.run([*command, *tests, *extra], cwd=ROOT, env=env, check=False)
    verdict = "passed" if result.returncode == 0 else f"failed (pytest exit {result.returncode})"
    print(f"gate: {args.model} {verdict}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
