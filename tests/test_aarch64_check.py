"""tools/aarch64_check.py names the requirement an aarch64 controller has no binary wheel
for: checked against a local wheelhouse (pip download with --no-index), a pure-Python wheel
that resolves and an x86-64-only one that does not."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import aarch64_check  # noqa: E402


def wheel(folder: Path, name: str, tag: str) -> None:
    """A minimal valid wheel of ``name`` 1.0 with the platform ``tag``."""
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(folder / f"{name}-1.0-{tag}.whl", "w") as whl:
        whl.writestr(f"{name}/__init__.py", "")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        whl.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                                      f"true\nTag: {tag}\n")  # fmt: skip
        whl.writestr(f"{info}/RECORD", "")


def test_a_requirement_without_an_aarch64_wheel_is_named(tmp_path: Path) -> None:
    house = tmp_path / "wheels"
    house.mkdir()
    wheel(house, "plainpkg", "py3-none-any")
    wheel(house, "nativepkg", "cp311-cp311-manylinux_2_17_x86_64")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "robot"\ndependencies = ["plainpkg"]\n'
        '[project.optional-dependencies]\nfine = ["plainpkg"]\nnative = ["nativepkg"]\n',
        encoding="utf-8",
    )
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("plainpkg==1.0\n", encoding="utf-8")
    out = tmp_path / "rows.json"
    local = ["--pip-arg=--no-index", f"--pip-arg=--find-links={house}", "--json", str(out)]
    files = ["--pyproject", str(pyproject), "--constraints", str(constraints)]
    code = aarch64_check.main([*files, "--extras", "fine", "native", *local])
    assert code == 1
    rows = {r["install"]: r for r in json.loads(out.read_text())}
    assert rows["core"]["ok"] and rows["core"]["wheels"] == 1
    assert rows["core + fine"]["ok"] and rows["core + fine"]["expected"]
    native = rows["core + native"]
    assert not native["ok"] and not native["expected"]
    assert native["missing"] == "nativepkg"
    assert aarch64_check.main(["--pyproject", str(pyproject), "--extras", "nope"]) == 2
