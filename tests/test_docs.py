"""The documentation: README.md and the MkDocs site in docs/.

The site builds with ``mkdocs build --strict``, and every command the docs show is run.

How a command block is marked (docs/contributing.md says the same, for writers):

- A command example is a fenced block with the info string ``console``: lines ``$ command``,
  each followed by the output it prints. A command may go on over lines ending in ``\\``,
  and a here-document (``<<'EOF'`` ... ``EOF``) belongs to its command.
- The line just before the fence is ``<!-- runnable -->`` (this test runs the block) or
  ``<!-- not runnable: REASON -->`` (it does not; the reason says why, e.g. "takes an hour").
  Every ``console`` block carries one of the two; the README's first block (``make run``,
  ``make test``: the machine's set-up) is the one ``sh`` block, checked as it must read.
- The exit code: a command line may end in ``# exit N``; else an output line ``exit N: ...``
  (what ``onboard run`` and ``onboard task run`` print) gives it; else it is 0. Every
  runnable block shows at least one exit code one way or the other.
- The output shown is checked: its lines, less the ``...`` lines that mark what was left out,
  must be lines of the real output (stdout and stderr together), in that order, compared with
  surrounding whitespace and runs of spaces ignored and the volatile parts in VOLATILE (temporary
  folder, ports, time stamps, wall times) normalised on both sides.

The blocks of one page run in order in one new temporary folder, shown as ``~`` in their
output (so the tour starts in ``~``); ``cd DIR`` moves within it for the blocks that follow.
``.venv/bin`` comes first on PATH. The commands use the stand-in LLM and the virtual clock
(``--llm standin --clock virtual``) or need no LLM at all, so every page runs in seconds.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted([README, *DOCS.rglob("*.md")])
BIN = Path(sys.executable).parent
#: pages run at once (each a chain of processes): two cores' worth
WORKERS = min(2, os.cpu_count() or 1)

#: the README's first block, as it must read (the two commands, first thing after the title)
SETUP_BLOCK = """\
```sh
make run     # the main job on the embedded defaults: simulated robot, SmolLM2-135M on loopback
make test    # lint, type-check and every test (CI runs exactly this through .ci/run)
```"""

#: what differs from run to run, normalised in the shown and the real output alike
VOLATILE = [
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT"),
    (re.compile(r"\b\d{8}-\d{6}\b"), "STAMP"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "DATE"),
    (re.compile(r"\b\d+\.\d+ s wall time"), "N s wall time"),
    (re.compile(r"request\(s\), \d+\.\d+ s\)"), "request(s), N s)"),
    # the embedding cache's file is named after the model, tokenizer and onnxruntime version
    (re.compile(r"\b[0-9a-f]{16}\.npz\b"), "IDENTITY.npz"),
]

FENCE = re.compile(r"^(`{3,})([^`\s]*)")
MARKER = re.compile(r"^<!-- (runnable|not runnable: (?P<why>.+?)) -->$")
EXIT_COMMENT = re.compile(r"\s+# exit (\d+)\b[^\n]*$")
EXIT_LINE = re.compile(r"^exit (\d+): ")
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")


@dataclass
class Command:
    text: str
    shown: list[str] = field(default_factory=list)
    exit: int | None = None


@dataclass
class Block:
    page: Path
    line: int
    info: str
    marker: str | None
    body: list[str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with the marker on the line before it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    row = 0
    while row < len(lines):
        opening = FENCE.match(lines[row])
        if opening is None:
            row += 1
            continue
        fence = opening[1]
        end = next(
            i
            for i in range(row + 1, len(lines))
            if lines[i].startswith(fence) and not lines[i].strip().strip("`")
        )
        before = lines[row - 1] if row else ""
        marker = before if MARKER.match(before) else None
        found.append(Block(page, row + 1, opening[2], marker, lines[row + 1 : end]))
        row = end + 1
    return found


def commands(block: Block) -> list[Command]:
    """The block's ``$`` commands, each with the output lines shown after it."""
    found: list[Command] = []
    lines = iter(block.body)
    for line in lines:
        if not line.startswith("$ "):
            assert found, f"{block.where}: output before the first $ command"
            found[-1].shown.append(line)
            continue
        text = line[2:]
        while text.endswith("\\"):
            text = text[:-1] + "\n" + next(lines)
        heredoc = HEREDOC.search(text)
        if heredoc:
            body = []
            for more in lines:
                body.append(more)
                if more.strip() == heredoc[1]:
                    break
            text = "\n".join([text, *body])
        command = Command(text)
        comment = EXIT_COMMENT.search(text.splitlines()[0])
        if comment:
            command.exit = int(comment[1])
        found.append(command)
    for command in found:
        shown = [int(m[1]) for line in command.shown if (m := EXIT_LINE.match(line))]
        if not shown:
            continue
        if command.exit is None:
            command.exit = shown[-1]
        assert command.exit == shown[-1], (
            f"{block.where}: `{command.text}` shows # exit {command.exit} and exit {shown[-1]}"
        )
    return found


def normal(line: str, folder: Path | None = None) -> str:
    if folder is not None:
        line = line.replace(str(folder), "~")
    for pattern, stands_for in VOLATILE:
        line = pattern.sub(stands_for, line)
    return " ".join(line.split())


def runnable_pages() -> list[Path]:
    return [page for page in PAGES if any(b.marker == "<!-- runnable -->" for b in blocks(page))]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "80"  # rich's tables as a pipe gets them, whatever the terminal
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr interleaved as they were written
    env.pop("VIRTUAL_ENV", None)
    return env


def run_command(command: Command, cwd: Path, home: Path, where: str) -> Path:
    """Run one command in ``cwd``; check its exit code and the output shown. Returns the
    folder the next command runs in (``cd`` moves it)."""
    words = shlex.split(command.text) if "\n" not in command.text else []
    if len(words) == 2 and words[0] == "cd":
        target = (cwd / words[1]).resolve()
        assert target.is_dir(), f"{where}: cd {words[1]}: no such folder"
        return target
    done = subprocess.run(
        ["bash", "-c", command.text],
        cwd=cwd,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    expected = command.exit if command.exit is not None else 0
    assert done.returncode == expected, (
        f"{where}: `{command.text}` exited {done.returncode}, the docs show {expected}:\n"
        f"{done.stdout}"
    )
    real = [normal(line, home) for line in done.stdout.splitlines()]
    position = 0
    for line in command.shown:
        if line.strip() in ("...", ""):
            continue
        wanted = normal(line)
        found = [i for i in range(position, len(real)) if real[i] == wanted]
        if not found:
            pytest.fail(
                f"{where}: `{command.text}` did not print this line shown in the docs "
                f"(or not in this order):\n  {wanted}\nit printed:\n{done.stdout}"
            )
        position = found[0] + 1
    return cwd


def test_every_command_block_is_marked() -> None:
    """Every ``console`` block is marked runnable, or not runnable with a reason; each
    runnable one shows at least one exit code."""
    problems = []
    for page in PAGES:
        for block in blocks(page):
            if block.info in ("sh", "bash", "shell") and block.page == README:
                continue  # the set-up block, checked by test_the_readme_is_a_front_page
            if block.info in ("sh", "bash", "shell"):
                problems.append(f"{block.where}: a command block is `console`, not `{block.info}`")
            if block.info != "console":
                continue
            if block.marker is None:
                problems.append(f"{block.where}: no <!-- runnable --> or not-runnable marker")
            elif block.marker == "<!-- runnable -->":
                shown = commands(block)
                assert shown, f"{block.where}: a runnable block with no $ command"
                if all(c.exit is None for c in shown):
                    problems.append(f"{block.where}: shows no exit code (# exit N, exit N: ...)")
    assert not problems, "\n".join(problems)


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the front page keeps to 150"
    assert lines[0] == "# onboard"
    assert "\n".join(lines[1:]).strip().startswith(SETUP_BLOCK)
    for target, anchor in re.findall(r"\]\(([^)#\s]+)(?:#([^)]*))?\)", text):
        if "://" in target:
            continue
        assert (ROOT / target).is_file(), f"README.md links to {target}, which is not there"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / target).read_text(encoding="utf-8"), re.M)
            assert anchor in {slug(h) for h in headings}, f"README.md: no #{anchor} in {target}"


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub and MkDocs's toc both make it for plain headings."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def run_page(page: Path, folder: Path) -> None:
    """Every runnable block of ``page``, in order, in ``folder``."""
    cwd = folder
    for block in blocks(page):
        if block.marker != "<!-- runnable -->":
            continue
        for command in commands(block):
            cwd = run_command(command, cwd, folder, block.where)


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, BaseException | None]:
    """Every runnable page, run at once, WORKERS at a time: the pages share nothing, and their
    commands are processes, so the threads only wait. Each page's failure, or None."""
    folders = {page: tmp_path_factory.mktemp(page.stem) for page in runnable_pages()}

    def run(page: Path) -> BaseException | None:
        try:
            run_page(page, folders[page])
        except BaseException as failure:  # an assert, or pytest.fail's Failed
            return failure
        return None

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return dict(zip(folders, pool.map(run, folders), strict=True))


# the first page's test also sets up page_runs, every page's commands (80 s on 2 idle cores,
# over 120 s beside other work): each command has its own 120-s bound, so the test's ceiling
# is the pages', not one command's
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_commands_shown_run(page: Path, page_runs: dict[Path, BaseException | None]) -> None:
    """Every runnable block of ``page`` ran, in order, in one new folder, and exited and
    printed as the page shows."""
    failure = page_runs[page]
    if failure is not None:
        raise failure


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: every page in the nav, every link and anchor resolves."""
    began = time.monotonic()
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # mkdocs-material's banner
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert time.monotonic() - began < 30, "the site should build in seconds"


def test_the_code_paths_named_exist() -> None:
    """Every ``runtime/...py`` and ``drivers/...py`` the docs name (and every ``tests/``,
    ``bench/``, ``tools/`` and ``models/`` script) is a file of the checkout, and so is every
    module of the architecture page's table (named from its package)."""
    missing = []
    folders = "runtime|drivers|tests|bench|tools|models"
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for path in set(re.findall(rf"\b((?:{folders})/[\w/]*?\w+\.py)\b", text)):
            if not (ROOT / path).is_file():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    table = (DOCS / "architecture.md").read_text(encoding="utf-8")
    for row in re.findall(r"^\| (.+?) \| .+ \|$", table, re.MULTILINE):
        for path in re.findall(r"`((?:\w+/)+\w+\.py)`", row):
            if not any((ROOT / top / path).is_file() for top in ("", "runtime")):
                missing.append(f"docs/architecture.md: {path}")
    assert not missing, "\n".join(missing)
