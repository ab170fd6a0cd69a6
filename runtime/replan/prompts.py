"""The ReplanVLM bots' requests and how their replies are read (seed 002, section III).

Five requests, each an OpenAI chat exchange; the system message's first line names the bot:

- **goal reader** (:func:`goal_messages`, once before the first plan): the instruction and
  the scene as text; the reply is JSON ``{"mentions": [...], "relations": [...]}`` under
  :func:`goal_schema`, which runtime/replan/goal.py checks against the request's own words
  and then against perception after each run (not a part of the seed: onboard's verdict);

- **Decision Bot** (:func:`decision_messages`): the seed's prompt parts in order: the role,
  the error messages of earlier tries, the robot API's documentation byte for byte
  (:func:`onboard.replan.api.api_doc`), the chain of thought to follow, worked examples; then
  the instruction with the camera image(s) (or, text-only, the detector's scene as text). The
  reply is free text: ``PLAN:`` numbered steps, then ``CODE:`` one fenced Python block
  (:func:`read_proposal`).
- **Inner Bot**, plan/code match (:func:`match_messages`): the instruction, the plan, the
  code and the image; the reply is JSON ``{"match": bool, "reason": str}``.
- **Extra Bot** (:func:`extra_messages`): the instruction, plan and code, the scene states
  before and after with their changes, how the run ended, and the images before and after;
  the reply is JSON ``{"done": bool, "reason": str}``.
- **SayCan step** (:func:`saycan_messages`, a baseline): the instruction, the scene as text,
  the steps taken; the reply is JSON ``{"step": one of the listed steps}`` under the schema.

The section headings below are what a model (or the stand-in VLM) reads; they are fixed here
and nowhere else.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onboard.llm.content import user_message
from onboard.llm.judge import judge_messages, judge_schema, read_judgement, verdict_schema
from onboard.llm.types import Message
from onboard.manip.goal import relations_schema
from onboard.replan.api import api_doc

__all__ = [
    "DECISION_ROLE",
    "EXTRA_ROLE",
    "GOAL_RELATIONS",
    "GOAL_ROLE",
    "MATCH_ROLE",
    "SAYCAN_ROLE",
    "Proposal",
    "decision_messages",
    "extra_messages",
    "extra_schema",
    "goal_messages",
    "goal_schema",
    "match_messages",
    "match_schema",
    "read_proposal",
    "read_verdict",
    "saycan_messages",
    "saycan_schema",
]

DECISION_ROLE = "You are the Decision Bot of a robot arm that works at a table."
MATCH_ROLE = "You are the Inner Bot of a robot arm: you check a plan against its code."
EXTRA_ROLE = "You are the Extra Bot of a robot arm: you judge whether a task was done."
SAYCAN_ROLE = "You are the step chooser of a robot arm: you choose its next skill."
GOAL_ROLE = "You are the goal reader of a robot arm: you say what must hold when a request is done."

INSTRUCTION = "Instruction:"
ERRORS = "Error messages from earlier tries:"
SCENE = "Scene (what the robot's detector sees):"
PLAN = "PLAN:"
CODE = "CODE:"

_DECISION_SYSTEM = """{role}
You see the table through the robot's camera and you write a plan and a Python program that
does it with the robot API below. The program runs in a sandbox: no imports, no files, only
the API's functions and simple Python (if, for, while with a bound, functions, lists, dicts,
print). Object names are the ones detect() returns.

The robot API:
{api}
How to answer. Think step by step:
1. Look at the image(s): which objects are there, what is stacked on what, what is hidden.
2. Read the instruction and any error messages from earlier tries: say what went wrong.
3. Write the plan: numbered steps, one robot action each.
4. Write the code: exactly the plan's steps, in the same order, with the robot API.
Answer in this form and nothing else:
PLAN:
1. <step>
2. <step>
CODE:
```python
<the program>
```"""

_EXAMPLES: list[tuple[str, str]] = [
    (
        "Put the green block on the plate.",
        """PLAN:
1. Find the green block and the plate.
2. Pick up the green block.
3. Put it onto the plate.
4. Go home.
CODE:
```python
names = detect()
print("seen:", names)
pick("green block")
put_in("plate")
home()
```""",
    ),
    (
        "Hand me something red.",
        """PLAN:
1. Find something red on the table.
2. Pick it up.
3. Hold it out to the person.
CODE:
```python
detect()
red = find("something red")
print("red:", red)
pick(red)
give_me()
```""",
    ),
]


def _errors_text(errors: Sequence[str]) -> str:
    if not errors:
        return f"{ERRORS} none."
    return ERRORS + "\n" + "\n".join(f"- {' '.join(e.split())}" for e in errors)


def decision_messages(
    instruction: str,
    images: Sequence[bytes] = (),
    image_notes: Sequence[str] = (),
    scene_text: str | None = None,
    errors: Sequence[str] = (),
    role: str = DECISION_ROLE,
) -> list[Message]:
    """The Decision Bot's request. ``images`` are PNG or JPEG bytes (the camera's frame first,
    then any the instruction refers to, e.g. a goal picture), each described in
    ``image_notes``; ``scene_text`` (a :class:`SceneState`'s text) stands in for the images in
    the text-only rows. ``errors`` are the messages of earlier tries, oldest first; ``role``
    the system message's first line (a code skill's ``[prompt] intro``)."""
    system = _DECISION_SYSTEM.format(role=role, api=api_doc())
    messages: list[Message] = [{"role": "system", "content": system}]
    for task, answer in _EXAMPLES:
        messages.append({"role": "user", "content": f"{INSTRUCTION} {task}\n{ERRORS} none."})
        messages.append({"role": "assistant", "content": answer})
    text = f"{INSTRUCTION} {instruction}\n{_errors_text(errors)}"
    if scene_text is not None:
        text += f"\n{SCENE}\n{scene_text}"
    if image_notes:
        text += "\nImages: " + "; ".join(
            f"image {i} is {note}" for i, note in enumerate(image_notes, 1)
        )
        text += "."
    messages.append(user_message(text, images))
    return messages


@dataclass(frozen=True)
class Proposal:
    """A Decision Bot's reply, read: the plan's steps and the program."""

    plan: tuple[str, ...]
    code: str
    reply: str

    def plan_text(self) -> str:
        return "\n".join(f"{i}. {step}" for i, step in enumerate(self.plan, 1))

    def to_record(self) -> dict[str, object]:
        return {"plan": list(self.plan), "code": self.code}


_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_STEP = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+(.+?)\s*$")


def read_proposal(text: str) -> Proposal | str:
    """The reply's plan and code, or what is wrong with its form (the seed's format check:
    a message for the Decision Bot's next try)."""
    upper = text.upper()
    plan_at, code_at = upper.find(PLAN), upper.find(CODE)
    if plan_at < 0:
        return f"the reply has no '{PLAN}' section: answer with {PLAN}, then {CODE}"
    if code_at < 0 or code_at < plan_at:
        return f"the reply has no '{CODE}' section after its plan"
    steps = tuple(
        m.group(1)
        for line in text[plan_at + len(PLAN) : code_at].splitlines()
        if (m := _STEP.match(line))
    )
    if not steps:
        return "the plan has no numbered steps"
    fenced = _FENCE.search(text, code_at)
    if fenced is None:
        return "the code is not in one ```python fenced block"
    code = fenced.group(1).strip("\n") + "\n"
    if not code.strip():
        return "the code block is empty"
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return f"the code does not parse: line {exc.lineno}: {exc.msg}"
    return Proposal(plan=steps, code=code, reply=text)


def _program_text(proposal: Proposal) -> str:
    return f"{PLAN}\n{proposal.plan_text()}\n{CODE}\n```python\n{proposal.code}```"


def match_messages(instruction: str, proposal: Proposal, images: Sequence[bytes]) -> list[Message]:
    """The Inner Bot's plan/code match question (the seed's second internal check)."""
    system = (
        f"{MATCH_ROLE}\nThe robot API is the one below. Read the plan and the code: does the "
        "code do each step of the plan, in order, and nothing the plan does not say? Answer "
        'in JSON: {"match": true or false, "reason": "<the first step the code misses or '
        'changes, or why they match>"}.\n\nThe robot API:\n' + api_doc()
    )
    text = f"{INSTRUCTION} {instruction}\n{_program_text(proposal)}"
    return [{"role": "system", "content": system}, user_message(text, images)]


def match_schema() -> dict[str, Any]:
    return verdict_schema("match")


def extra_messages(
    instruction: str,
    proposal: Proposal,
    before_text: str,
    after_text: str,
    changes_text: str,
    ended: str,
    before_image: bytes | None,
    after_image: bytes | None,
    goal_images: Sequence[bytes] = (),
    goal_notes: Sequence[str] = (),
) -> list[Message]:
    """The Extra Bot's question (the seed's external check): was the instruction done? The
    images: the camera's before the run, after it, then any the instruction refers to (a goal
    picture), described in ``goal_notes``. The question is the runtime's one verifier
    (onboard.llm.judge), which a scene skill's goal uses too."""
    images = [i for i in (before_image, after_image) if i is not None]
    notes = ["the table before the run", "the table after it"][: len(images)]
    setting = (
        "You see the table before and after the robot ran a program, and what the robot's "
        "perception says changed."
    )
    return judge_messages(
        EXTRA_ROLE,
        setting,
        instruction,
        _program_text(proposal),
        ended,
        before_text,
        after_text,
        changes_text,
        [*images, *goal_images],
        [*notes, *goal_notes],
    )


def extra_schema() -> dict[str, Any]:
    return judge_schema()


def read_verdict(text: str, key: str) -> tuple[bool, str]:
    """``(value, reason)`` of a ``{"<key>": bool, "reason": str}`` reply (its schema was
    checked by the client); ValueError when it is not one."""
    return read_judgement(text, key)


def saycan_messages(
    instruction: str, scene_text: str, done: Sequence[str], steps: Sequence[str]
) -> list[Message]:
    """One SayCan-style step: choose the next of ``steps`` (calls of the robot API, and
    ``done``) given the scene as text and the steps already taken."""
    system = (
        f"{SAYCAN_ROLE}\nEach step is one call of the robot API below, or done when the "
        'instruction is carried out. Answer in JSON: {"step": "<one of the steps listed>"}.'
        "\n\nThe robot API:\n" + api_doc()
    )
    taken = "\n".join(f"{i}. {s}" for i, s in enumerate(done, 1)) or "none yet"
    text = (
        f"{INSTRUCTION} {instruction}\n{SCENE}\n{scene_text}\n"
        f"Steps taken so far:\n{taken}\n"
        "Steps to choose from:\n" + "\n".join(f"- {s}" for s in steps) + "\nThe next step:"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def saycan_schema(steps: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"step": {"type": "string", "enum": list(steps)}},
        "required": ["step"],
        "additionalProperties": False,
    }


#: the goal reader's relations (runtime/replan/goal.py checks them against perception)
GOAL_RELATIONS = ("on", "in", "held")


def goal_messages(instruction: str, scene_text: str) -> list[Message]:
    """The goal reader's question, asked once before the first plan: the request as relations
    the camera can check (an object on another, in a container, held by the gripper)."""
    system = (
        f"{GOAL_ROLE}\nWrite the end state the instruction asks for, as a dictionary with the "
        'keys "mentions" and "relations". "mentions": every object the instruction names, in '
        'its own words. "relations": what must hold when it is done, each a dictionary with '
        '"relation" (on: resting on another object; in: inside a container such as a box, a '
        'plate or a drawer; held: in the gripper), "object" and "target" (the other object, '
        'or "none" for held), with the names the scene gives. Give no relation for what the '
        "instruction does not ask, and none at all when what it asks is not one of these."
    )
    text = f"{INSTRUCTION} {instruction}\n{SCENE}\n{scene_text}"
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def goal_schema(names: Sequence[str]) -> dict[str, Any]:
    """The goal reader's reply: relations over ``names`` (the objects seen)."""
    enum = list(names) or ["none"]
    return relations_schema(GOAL_RELATIONS, enum, [*enum, "none"], mentions=6, relations=4,
                            mention_length=40)  # fmt: skip
