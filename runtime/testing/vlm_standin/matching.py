"""The Inner Bot's plan/code match, as the stand-in does it: the plan's steps read as actions
by their verbs, the code's robot API calls read with ``ast``, the two sequences aligned.

A step's actions are the first words of its clauses (split at ``.;:,``, "and", "then"):
pick/take/grab/grasp/lift/remove -> pick; place/put/drop/set/lay -> put; hand/give/pass ->
give; open, close; go/return ... home -> home; wait -> wait; move -> move. Looking, finding
and reading are perception: no action. In the code, ``place`` and ``put_in`` are both
"put", ``wait`` and ``wait_until_at`` both "wait" (a run of waits is one wait on each side);
calls of the program's own functions count their actions where they are called.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Action", "code_actions", "match", "plan_actions"]

_CODE_KIND = {
    "pick": "pick",
    "place": "put",
    "put_in": "put",
    "give_me": "give",
    "open_drawer": "open",
    "close_drawer": "close",
    "home": "home",
    "wait": "wait",
    "wait_until_at": "wait",
    "move_to": "move",
}
_VERB_KIND = {
    **dict.fromkeys(("pick", "take", "grab", "grasp", "lift", "remove"), "pick"),
    **dict.fromkeys(("place", "put", "drop", "set", "lay"), "put"),
    **dict.fromkeys(("hand", "give", "pass"), "give"),
    "open": "open",
    "close": "close",
    "shut": "close",
    "wait": "wait",
    "move": "move",
}
_CLAUSES = re.compile(r"[.;:,]|\band\b|\bthen\b", re.I)
_WORD = re.compile(r"[a-z]+")
_FILLER = frozenset({"first", "then", "next", "now", "finally", "and", "also"})


@dataclass(frozen=True)
class Action:
    kind: str
    thing: str | None  # the object named (plan) or the first argument when a string (code)
    where: int  # the step's number (plan) or the line (code)
    text: str  # the step's text, or the call as written


def plan_actions(steps: Sequence[str], names: Sequence[str]) -> list[Action]:
    """The actions of the plan's steps; ``names``: the object names to look for in them."""
    out: list[Action] = []
    longest_first = sorted(set(names), key=len, reverse=True)
    for number, step in enumerate(steps, 1):
        kinds: list[Action] = []
        for clause in _CLAUSES.split(step):
            words = [w for w in _WORD.findall(clause.lower()) if w not in _FILLER]
            if not words:
                continue
            kind = _VERB_KIND.get(words[0])
            if words[0] in ("go", "return") and "home" in words:
                kind = "home"
            if kind is None or (kinds and kinds[-1].kind == kind):
                continue
            thing = next((n for n in longest_first if n.lower() in clause.lower()), None)
            kinds.append(Action(kind, thing, number, step))
        out += kinds
    return _one_wait(out)


def code_actions(source: str) -> list[Action]:
    """The robot API actions of the program, in the order they are written."""
    tree = ast.parse(source)
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    out: list[Action] = []

    def visit(node: ast.AST, inside: frozenset[str]) -> None:
        if isinstance(node, ast.FunctionDef):
            return  # counted where it is called
        for child in ast.iter_child_nodes(node):
            visit(child, inside)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in _CODE_KIND:
                first = node.args[0] if node.args else None
                thing = first.value if isinstance(first, ast.Constant) else None
                text = ast.unparse(node)
                out.append(
                    Action(_CODE_KIND[name], thing if isinstance(thing, str) else None,
                           node.lineno, text)
                )  # fmt: skip
            elif name in functions and name not in inside:
                for statement in functions[name].body:
                    visit(statement, inside | {name})

    for statement in tree.body:
        visit(statement, frozenset())
    return _one_wait(out)


def _one_wait(actions: list[Action]) -> list[Action]:
    return [
        a
        for i, a in enumerate(actions)
        if not (a.kind == "wait" and i and actions[i - 1].kind == "wait")
    ]


def _quoted(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def match(steps: Sequence[str], source: str) -> tuple[bool, str]:
    """Whether the code does the plan's steps in order and nothing else, and why not: the
    first step it misses or changes, or the first call no step says."""
    try:
        code = code_actions(source)
    except SyntaxError as exc:
        return False, f"the code does not parse: line {exc.lineno}: {exc.msg}"
    names = [a.thing for a in code if a.thing is not None]
    plan = plan_actions(steps, names)
    kinds = difflib.SequenceMatcher(
        None, [a.kind for a in plan], [a.kind for a in code], autojunk=False
    )
    for op, p1, p2, c1, c2 in kinds.get_opcodes():
        if op == "equal":
            for p, c in zip(plan[p1:p2], code[c1:c2], strict=True):
                if p.thing and c.thing and p.thing != c.thing:
                    return False, (
                        f"step {p.where} ('{_quoted(p.text)}') names the {p.thing}, but the "
                        f"code's {c.text} on line {c.where} does not"
                    )
            continue
        if p1 < p2:
            p = plan[p1]
            if c1 < c2:
                return False, (
                    f"step {p.where} ('{_quoted(p.text)}') is not what the code does there: "
                    f"it calls {code[c1].text} on line {code[c1].where}"
                )
            return (
                False,
                f"the code misses step {p.where} ('{_quoted(p.text)}'): no {p.kind} call for it",
            )
        c = code[c1]
        return False, f"the code calls {c.text} on line {c.where}, which no step of the plan says"
    return True, f"the code does the plan's {len(steps)} steps in order"
