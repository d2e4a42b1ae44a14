"""A small, safe evaluator for the integer expressions in manifests and search-space constraints."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from functools import lru_cache
from types import CodeType
from typing import Any

from autodiscovery import AutoDiscoveryError


class ExprError(AutoDiscoveryError):
    pass


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


FUNCTIONS: dict[str, Callable[..., int]] = {"cdiv": cdiv, "min": min, "max": max}
_GLOBALS: dict[str, Any] = {"__builtins__": {}, **FUNCTIONS}  # what an expression sees besides its names
BINARY: dict[type[ast.operator], Callable[[Any, Any], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
    ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
}


def evaluate(text: str | int | bool, names: Mapping[str, int]) -> int | bool:
    """Evaluate `text` with integer `names`; only arithmetic, comparisons, and/or/not, cdiv/min/max.

    Strings (a knob's value, a quoted constant) may only be compared for equality."""
    if isinstance(text, (bool, int)):
        return text
    try:
        tree = _parse(str(text))
    except SyntaxError:
        raise ExprError(f"'{text}' is not a valid expression") from None
    value = _eval(tree.body, names, str(text))
    if isinstance(value, str):
        raise ExprError(f"'{text}': a string, not an integer or a truth value")
    return value


@lru_cache(maxsize=4096)
def _parse(text: str) -> ast.Expression:
    """Constraints are evaluated for every configuration of a space: each text is parsed once."""
    return ast.parse(text, mode="eval")


def _eval(node: ast.AST, names: Mapping[str, int], text: str) -> int | bool | str:
    """Strings (a knob's value, a quoted constant) are values here only to be compared."""
    match node:
        case ast.Constant(value=bool() | int() | str() as v):
            return v
        case ast.Name(id=name):
            if name not in names:
                raise ExprError(f"'{text}': unknown name '{name}' (known: {', '.join(sorted(names))})")
            return names[name]
        case ast.BinOp(left=l, op=op, right=r) if type(op) in BINARY:
            a, b = _eval(l, names, text), _eval(r, names, text)
            if isinstance(a, str) or isinstance(b, str):
                raise ExprError(f"'{text}': arithmetic on a string")
            if isinstance(op, ast.Pow) and not 0 <= b <= 64:
                raise ExprError(f"'{text}': exponent {b} out of range (0..64)")
            if isinstance(op, (ast.FloorDiv, ast.Mod)) and b == 0:
                raise ExprError(f"'{text}': division by zero")
            return BINARY[type(op)](a, b)
        case ast.UnaryOp(op=ast.USub(), operand=x):
            v = _eval(x, names, text)
            if isinstance(v, str):
                raise ExprError(f"'{text}': arithmetic on a string")
            return -v
        case ast.UnaryOp(op=ast.Not(), operand=x):
            return not _eval(x, names, text)
        case ast.BoolOp(op=ast.And(), values=vs):
            return all(_eval(v, names, text) for v in vs)
        case ast.BoolOp(op=ast.Or(), values=vs):
            return any(_eval(v, names, text) for v in vs)
        case ast.Compare(left=l, ops=ops, comparators=rs) if all(type(o) in COMPARE for o in ops):
            left = _eval(l, names, text)
            for cmp, r in zip(ops, rs):
                right = _eval(r, names, text)
                if isinstance(left, str) != isinstance(right, str) or (
                        isinstance(left, str) and type(cmp) not in (ast.Eq, ast.NotEq)):
                    raise ExprError(f"'{text}': a string can only be compared with == or != to a string")
                if not COMPARE[type(cmp)](left, right):
                    return False
                left = right
            return True
        case ast.Call(func=ast.Name(id=fn), args=args, keywords=[]) if fn in FUNCTIONS:
            return FUNCTIONS[fn](*(_eval(a, names, text) for a in args))
    raise ExprError(f"'{text}': only integer arithmetic, comparisons and cdiv/min/max are allowed")


_ALLOWED = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Name, ast.Constant, ast.Call,
            ast.Load, ast.And, ast.Or, ast.Not, ast.USub, *BINARY, *COMPARE)


def compiled(text: str) -> CodeType:
    """`text` as Python bytecode, for the project's own constraints, evaluated once per configuration of
    a space (hundreds of thousands): the same grammar as `evaluate`, checked once. Candidates' manifests
    go through `evaluate`, which also bounds powers."""
    try:
        tree = _parse(str(text))
    except SyntaxError:
        raise ExprError(f"'{text}' is not a valid expression") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED) or (isinstance(node, ast.Call) and not (
                isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and not node.keywords)):
            raise ExprError(f"'{text}': only integer arithmetic, comparisons and cdiv/min/max are allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (bool, int, str)):
            raise ExprError(f"'{text}': only integer arithmetic, comparisons and cdiv/min/max are allowed")
    return compile(tree, f"<{text}>", "eval")


def run(code: CodeType, text: str, names: Mapping[str, int | str]) -> int | bool:
    """Evaluate what `compiled` made."""
    try:
        return eval(code, _GLOBALS, names if type(names) is dict else dict(names))
    except NameError as exc:
        raise ExprError(f"'{text}': unknown name ({exc})") from None
    except (ZeroDivisionError, TypeError) as exc:
        raise ExprError(f"'{text}': {exc}") from None
