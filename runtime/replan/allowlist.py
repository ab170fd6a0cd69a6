"""The sandbox's check: a generated program's syntax tree against an allow-list.

Only what is listed here may appear; anything else is refused with its line and a reason the
program's author (an LLM, mostly) can act on. This is the first of two walls: the child
process that runs an accepted program has only the allowed builtins and the robot API in its
namespace, and the operating system's limits around it (``sandbox.py``, ``child.py``).

Decisions beyond the brief's list: star-arguments (``f(*xs, **kw)``, ``[*a, *b]``,
``a, *rest = xs``) are allowed, they only move plain values around; the bare name ``_`` is
allowed (``for _ in range(3)``), every other name starting with ``_`` is refused; ``del`` of a
subscript (``del d[k]``) is allowed, of a name refused; annotations are allowed and checked
like any expression; ``assert``, ``raise`` and ``:=`` are refused; a name that is read but
bound nowhere in the program is refused as undefined.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["ALLOWED_BUILTINS", "MAX_SOURCE_CHARS", "METHODS", "PROGRAM", "Refusal", "check"]

#: The file name a program's code objects carry (tracebacks, the child's line numbers).
PROGRAM = "<program>"

MAX_SOURCE_CHARS = 100_000

ALLOWED_BUILTINS: tuple[str, ...] = (
    "len", "range", "min", "max", "abs", "round", "sorted", "enumerate", "zip", "list", "dict",
    "tuple", "set", "str", "int", "float", "bool", "sum", "any", "all", "print", "reversed",
    "isinstance",
)  # fmt: skip

#: Methods a program may call on a value (list, dict and str methods that only move data).
#: Not ``format`` / ``format_map``: their fields read attributes (``"{0.__class__}"``).
METHODS = frozenset({
    "append", "extend", "pop", "insert", "remove", "index", "count", "sort", "reverse", "keys",
    "values", "items", "get", "lower", "upper", "strip", "split", "join", "startswith",
    "endswith", "replace",
})  # fmt: skip

_INTERNALS = "reaches into objects' internals"
_CODE = "runs code the check has not seen"
_OUTSIDE = "reaches the files, the terminal or the interpreter"
_BUILTIN_REASONS = {
    "getattr": _INTERNALS, "setattr": _INTERNALS, "delattr": _INTERNALS, "hasattr": _INTERNALS,
    "type": _INTERNALS, "object": _INTERNALS, "super": _INTERNALS, "vars": _INTERNALS,
    "dir": _INTERNALS, "globals": _INTERNALS, "locals": _INTERNALS, "id": _INTERNALS,
    "classmethod": _INTERNALS, "staticmethod": _INTERNALS, "property": _INTERNALS,
    "memoryview": _INTERNALS, "bytearray": _INTERNALS, "iter": _INTERNALS, "next": _INTERNALS,
    "eval": _CODE, "exec": _CODE, "compile": _CODE, "__import__": _CODE,
    "open": _OUTSIDE, "input": _OUTSIDE, "breakpoint": _OUTSIDE, "help": _OUTSIDE,
    "exit": _OUTSIDE, "quit": _OUTSIDE, "copyright": _OUTSIDE, "credits": _OUTSIDE,
    "license": _OUTSIDE,
}  # fmt: skip
_REFUSED_BUILTINS = (set(dir(builtins)) | set(_BUILTIN_REASONS)) - set(ALLOWED_BUILTINS)

_REFUSED_NODES: dict[type[ast.AST], str] = {
    ast.Import: "import is not allowed: the program reaches the robot only through the API"
    " functions, which need no import",
    ast.ImportFrom: "import is not allowed: the program reaches the robot only through the API"
    " functions, which need no import",
    ast.While: "while is not allowed (a loop with no bound): use for ... in range(N)",
    ast.Try: "try is not allowed: a failed API call or any other error ends the program",
    ast.TryStar: "try is not allowed: a failed API call or any other error ends the program",
    ast.With: "with is not allowed",
    ast.AsyncWith: "async with is not allowed",
    ast.ClassDef: "class is not allowed: use functions, lists and dicts",
    ast.Global: "global is not allowed: return values from functions instead",
    ast.Nonlocal: "nonlocal is not allowed: return values from functions instead",
    ast.Yield: "yield is not allowed (no generator functions): build and return a list",
    ast.YieldFrom: "yield is not allowed (no generator functions): build and return a list",
    ast.Await: "await is not allowed",
    ast.AsyncFunctionDef: "async def is not allowed",
    ast.AsyncFor: "async for is not allowed",
    ast.Raise: "raise is not allowed: the program ends when it reaches its end",
    ast.Assert: "assert is not allowed: use if",
    ast.NamedExpr: ":= is not allowed: assign on a line of its own",
    ast.Match: "match is not allowed: use if / elif",
}


@dataclass(frozen=True)
class Refusal:
    """One thing the check refuses: the program's line (1-based) and why."""

    line: int
    reason: str


def check(source: str, api: Sequence[str]) -> list[Refusal]:
    """The refusals of ``source`` against the allow-list, in line order; ``[]`` = accepted.

    ``api`` holds the names of the robot API functions the program may call.
    """
    if len(source) > MAX_SOURCE_CHARS:
        return [Refusal(1, f"the program is {len(source)} characters long; at most "
                           f"{MAX_SOURCE_CHARS} are allowed")]  # fmt: skip
    try:
        tree = ast.parse(source, PROGRAM)
    except SyntaxError as exc:
        return [Refusal(exc.lineno or 1, f"syntax error: {exc.msg}")]
    except (RecursionError, MemoryError):
        return [Refusal(1, "nested too deeply to parse")]
    except ValueError as exc:  # a NUL byte
        return [Refusal(1, f"cannot be parsed: {exc}")]
    checker = _Checker(tree, api)
    try:
        checker.visit(tree)
    except RecursionError:
        return [Refusal(1, "nested too deeply to check")]
    if checker.refusals:
        return sorted(dict.fromkeys(checker.refusals), key=lambda r: r.line)
    try:  # what only the compiler finds: return outside a function, break outside a loop
        compile(tree, PROGRAM, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return [Refusal(exc.lineno or 1, f"syntax error: {exc.msg}")]
    except (RecursionError, MemoryError):
        return [Refusal(1, "nested too deeply to compile")]
    return []


class _Checker:
    """Walks the tree; every node kind it accepts has a method here, anything else is refused."""

    def __init__(self, tree: ast.Module, api: Sequence[str]) -> None:
        self.api = frozenset(api)
        self.refusals: list[Refusal] = []
        self.bound, self.functions = _bindings(tree)
        self.line = 1

    def refuse(self, reason: str) -> None:
        self.refusals.append(Refusal(self.line, reason))

    def visit(self, node: ast.AST | None) -> None:
        if node is None:
            return
        self.line = getattr(node, "lineno", self.line)
        method: Callable[[ast.AST], None] | None = getattr(self, "v_" + type(node).__name__, None)
        if method is not None:
            method(node)
        else:
            self.refuse(_REFUSED_NODES.get(type(node), f"{type(node).__name__} is not allowed"))
            self.inside(node)

    def inside(self, node: ast.AST) -> None:
        """The statements and expressions inside a refused node: their refusals too."""
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt | ast.expr):
                self.visit(child)
            elif isinstance(child, ast.excepthandler | ast.withitem | ast.match_case):
                self.inside(child)

    def visit_all(self, nodes: Sequence[ast.AST | None]) -> None:
        for node in nodes:
            self.visit(node)

    # statements

    def v_Module(self, node: ast.Module) -> None:
        self.visit_all(node.body)

    def v_Expr(self, node: ast.Expr) -> None:
        self.visit(node.value)

    def v_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.target(target)
        self.visit(node.value)

    def v_AugAssign(self, node: ast.AugAssign) -> None:
        self.target(node.target)
        self.visit(node.value)

    def v_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.target(node.target)
        self.visit(node.annotation)
        self.visit(node.value)

    def v_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self.visit_all(node.body)
        self.visit_all(node.orelse)

    def v_For(self, node: ast.For) -> None:
        self.target(node.target)
        self.visit(node.iter)
        self.visit_all(node.body)
        self.visit_all(node.orelse)

    def v_Break(self, node: ast.Break) -> None:
        pass

    def v_Continue(self, node: ast.Continue) -> None:
        pass

    def v_Pass(self, node: ast.Pass) -> None:
        pass

    def v_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.decorator_list:
            self.line = node.decorator_list[0].lineno
            self.refuse("decorators are not allowed")
        self.bind(node.name)
        self.arguments(node.args)
        self.visit(node.returns)
        self.visit_all(node.body)

    def v_Return(self, node: ast.Return) -> None:
        self.visit(node.value)

    def v_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            if isinstance(target, ast.Subscript):
                self.visit(target)
            else:
                self.refuse("del is allowed only of an item (del d[key]), not of a name")

    # expressions

    def v_Constant(self, node: ast.Constant) -> None:
        pass

    def v_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.bind(node.id)
        elif self.name_allowed(node.id) and not self.defined(node.id):
            self.refuse(f"`{node.id}` is not defined")

    def v_Attribute(self, node: ast.Attribute) -> None:
        self.visit(node.value)  # first: refusals in source order, `a.b.c` says b before c
        self.line = node.lineno
        if self.name_allowed(node.attr):
            self.refuse(f"attribute access `.{node.attr}` is not allowed; a program may only"
                        f" call the methods {', '.join(sorted(METHODS))}")  # fmt: skip

    def v_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            self.callee(func)
        elif isinstance(func, ast.Attribute):
            if func.attr in METHODS:
                self.visit(func.value)
            elif func.attr in ("format", "format_map"):
                self.refuse(f"`.{func.attr}` is not allowed (its fields read attributes):"
                            " use an f-string")  # fmt: skip
                self.visit(func.value)
            else:
                self.visit(func)
        else:
            self.refuse("only a name or an allowed method can be called")
            self.visit(func)
        self.visit_all(node.args)
        for keyword in node.keywords:
            if keyword.arg is not None:
                self.name_allowed(keyword.arg)
            self.visit(keyword.value)

    def v_Starred(self, node: ast.Starred) -> None:
        self.visit(node.value)

    def v_BinOp(self, node: ast.BinOp) -> None:
        self.visit_all([node.left, node.right])

    def v_UnaryOp(self, node: ast.UnaryOp) -> None:
        self.visit(node.operand)

    def v_BoolOp(self, node: ast.BoolOp) -> None:
        self.visit_all(node.values)

    def v_Compare(self, node: ast.Compare) -> None:
        self.visit_all([node.left, *node.comparators])

    def v_IfExp(self, node: ast.IfExp) -> None:
        self.visit_all([node.test, node.body, node.orelse])

    def v_Dict(self, node: ast.Dict) -> None:
        self.visit_all([*node.keys, *node.values])

    def v_Set(self, node: ast.Set) -> None:
        self.visit_all(node.elts)

    def v_List(self, node: ast.List) -> None:
        self.visit_all(node.elts)

    def v_Tuple(self, node: ast.Tuple) -> None:
        self.visit_all(node.elts)

    def v_Subscript(self, node: ast.Subscript) -> None:
        self.visit_all([node.value, node.slice])

    def v_Slice(self, node: ast.Slice) -> None:
        self.visit_all([node.lower, node.upper, node.step])

    def v_JoinedStr(self, node: ast.JoinedStr) -> None:
        self.visit_all(node.values)

    def v_FormattedValue(self, node: ast.FormattedValue) -> None:
        self.visit_all([node.value, node.format_spec])

    def v_Lambda(self, node: ast.Lambda) -> None:
        self.arguments(node.args)
        self.visit(node.body)

    def v_ListComp(self, node: ast.ListComp) -> None:
        self.comprehension(node.generators, [node.elt])

    def v_SetComp(self, node: ast.SetComp) -> None:
        self.comprehension(node.generators, [node.elt])

    def v_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        self.comprehension(node.generators, [node.elt])

    def v_DictComp(self, node: ast.DictComp) -> None:
        self.comprehension(node.generators, [node.key, node.value])

    # the parts

    def comprehension(self, generators: list[ast.comprehension], results: list[ast.expr]) -> None:
        for generator in generators:
            if generator.is_async:
                self.refuse("async comprehensions are not allowed")
            self.target(generator.target)
            self.visit(generator.iter)
            self.visit_all(generator.ifs)
        self.visit_all(results)

    def arguments(self, args: ast.arguments) -> None:
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        every += [a for a in (args.vararg, args.kwarg) if a is not None]
        for arg in every:
            self.line = arg.lineno
            self.bind(arg.arg)
            self.visit(arg.annotation)
        self.visit_all([*args.defaults, *args.kw_defaults])

    def target(self, node: ast.expr) -> None:
        self.line = node.lineno
        if isinstance(node, ast.Name | ast.Subscript):
            self.visit(node)
        elif isinstance(node, ast.Tuple | ast.List):
            for element in node.elts:
                self.target(element)
        elif isinstance(node, ast.Starred):
            self.target(node.value)
        elif isinstance(node, ast.Attribute):
            self.refuse(f"assigning to an attribute (`.{node.attr}`) is not allowed")
        else:
            self.refuse(f"cannot assign to {type(node).__name__}")

    def callee(self, func: ast.Name) -> None:
        name = func.id
        if not self.name_allowed(name):
            return
        if name not in self.api and name not in ALLOWED_BUILTINS and name not in self.functions:
            self.refuse(f"calls `{name}`, which is not a robot API function, an allowed builtin"
                        " or a function the program defines with def or lambda")  # fmt: skip

    def name_allowed(self, name: str) -> bool:
        """Refuses (and answers False for) a name no program may spell at all."""
        if name.startswith("_") and name != "_":
            self.refuse(f"`{name}`: names starting with _ are not allowed (dunders, private)")
            return False
        if name in _REFUSED_BUILTINS:
            why = _BUILTIN_REASONS.get(name, "a builtin outside the allow-list")
            self.refuse(f"`{name}` is not allowed ({why}); builtins allowed: "
                        + ", ".join(ALLOWED_BUILTINS))  # fmt: skip
            return False
        return True

    def bind(self, name: str) -> None:
        if not self.name_allowed(name):
            return
        if name in self.api:
            self.refuse(f"assigns to `{name}`, a robot API function: choose another name")
        elif name in ALLOWED_BUILTINS:
            self.refuse(f"assigns to `{name}`, a builtin: choose another name")

    def defined(self, name: str) -> bool:
        return name in self.api or name in ALLOWED_BUILTINS or name in self.bound


def _bindings(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Every name the program binds anywhere, and those bound to a def or a lambda."""
    bound: set[str] = set()
    functions: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef):
            bound.add(node.name)
            functions.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            functions.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return bound, functions
