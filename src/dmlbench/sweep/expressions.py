"""Small, safe expressions for sweep files: derived values and rule conditions.

``global_batch // workers``, ``workers >= 2 and exchange == 'ddp'``,
``0.1 if workers < 4 else 0.05``: Python syntax, restricted to arithmetic, comparisons,
boolean logic, conditional expressions, literals and a few pure functions. Names are
spec keys, written in full (``recipe.local_batch``) or as any unique suffix
(``local_batch``), exactly like ``--set``. Nothing is imported, called or looked up
outside that whitelist, so a sweep file cannot run code.

Nor can it tie up the machine: an expression is at most ``MAX_CHARS`` long and
``MAX_DEPTH`` deep, integers stay within ``MAX_INT_BITS`` (``10**10**10`` is refused
before it is computed), and strings and lists within ``MAX_ITEMS``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from dmlbench.errors import SpecError

MAX_CHARS = 1000
MAX_DEPTH = 32
MAX_INT_BITS = 4096  # about 1,233 decimal digits: far beyond any spec value
MAX_ITEMS = 10_000  # characters of a string, elements of a list

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "int": int,
    "float": float,
    "round": round,
    "abs": abs,
    "sqrt": math.sqrt,
    "log2": math.log2,
    "ceil": math.ceil,
    "floor": math.floor,
}


def _clip(text: str, limit: int = 60) -> str:
    """``text`` quoted, shortened for an error line."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _dotted(node: ast.expr) -> str | None:
    """``recipe.local_batch`` parses as attribute access; read it back as one name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def lookup(values: Mapping[str, Any], name: str) -> Any:
    """The value of spec key ``name`` (full dotted path or unique suffix) in flat ``values``."""
    if name in values:
        return values[name]
    matches = [k for k in values if k.endswith(f".{name}")]
    if len(matches) == 1:
        return values[matches[0]]
    if matches:
        raise SpecError(f"'{name}' is ambiguous in a sweep expression: say one of {matches}")
    raise SpecError(f"unknown name '{name}' in a sweep expression; use a spec key like workers")


class Expression:
    """A parsed expression; ``evaluate(values)`` against a flat ``{dotted key: value}``."""

    def __init__(self, text: str) -> None:
        self.text = text = str(text)
        if len(text) > MAX_CHARS:
            raise SpecError(
                f"sweep expression {_clip(text)} is {len(text):,} characters long; "
                f"at most {MAX_CHARS:,}"
            )
        try:
            self.tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as error:
            raise SpecError(f"sweep expression {text!r} is not valid: {error.msg}") from None
        except (RecursionError, MemoryError, ValueError):
            raise SpecError(f"sweep expression {_clip(text)} is nested too deeply") from None
        self._check(self.tree)

    def _check(self, node: ast.AST, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise SpecError(
                f"sweep expression {_clip(self.text)} is nested more than {MAX_DEPTH} deep"
            )
        allowed = (
            ast.BinOp,
            ast.UnaryOp,
            ast.BoolOp,
            ast.Compare,
            ast.IfExp,
            ast.Constant,
            ast.Name,
            ast.Attribute,
            ast.List,
            ast.Tuple,
            ast.Call,
            ast.Load,
            ast.boolop,
        )
        operator_ = (
            type(node.op)
            if isinstance(node, ast.BinOp | ast.UnaryOp)
            else next((type(op) for op in node.ops if type(op) not in _COMPARE), None)
            if isinstance(node, ast.Compare)
            else None
        )
        if operator_ is not None and operator_ not in {**_BINARY, **_UNARY, **_COMPARE}:
            raise SpecError(
                f"sweep expression {self.text!r} uses the operator {operator_.__name__}, "
                "which is not allowed: use + - * / // % **, comparisons, and/or/not"
            )
        if not isinstance(node, allowed):
            raise SpecError(
                f"sweep expression {self.text!r} uses {type(node).__name__}, which is not "
                "allowed: use arithmetic, comparisons, and/or/not, x if c else y, "
                f"and {', '.join(sorted(FUNCTIONS))}"
            )
        if isinstance(node, ast.Attribute) and _dotted(node) is None:
            raise SpecError(f"sweep expression {self.text!r}: only spec keys may use dots")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
                raise SpecError(
                    f"sweep expression {self.text!r} calls something other than "
                    f"{', '.join(sorted(FUNCTIONS))}"
                )
            if node.keywords:
                raise SpecError(f"sweep expression {self.text!r}: no keyword arguments")
            for arg in node.args:
                self._check(arg, depth + 1)
            return
        if isinstance(node, ast.Attribute):
            return
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.operator | ast.unaryop | ast.cmpop | ast.boolop):
                self._check(child, depth + 1)

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        try:
            return self._eval(self.tree, values)
        except SpecError:
            raise
        except (ArithmeticError, TypeError, ValueError) as error:
            raise SpecError(f"sweep expression {self.text!r} failed: {error}") from None
        except (RecursionError, MemoryError):
            raise SpecError(f"sweep expression {_clip(self.text)} is too large") from None

    def _bounded(self, value: Any) -> Any:
        """``value`` if it is within the size limits; a one-line refusal otherwise."""
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise SpecError(
                f"sweep expression {_clip(self.text)} gives a number over {MAX_INT_BITS} bits"
            )
        if isinstance(value, str | list) and len(value) > MAX_ITEMS:
            raise SpecError(f"sweep expression {_clip(self.text)} gives over {MAX_ITEMS:,} items")
        return value

    def _binary(self, op: type, left: Any, right: Any) -> Any:
        """``left op right``, refused before computing when the result would be huge."""
        integers = isinstance(left, int) and isinstance(right, int)
        huge = integers and right > 0 and (abs(left).bit_length() - 1) * right > MAX_INT_BITS
        if op is ast.Pow and huge:
            raise SpecError(
                f"sweep expression {_clip(self.text)}: {str(left)[:20]} ** "
                f"{str(right)[:20]} is over {MAX_INT_BITS} bits"
            )
        if op is ast.Mult:
            for sequence, count in ((left, right), (right, left)):
                sized = isinstance(sequence, str | list) and isinstance(count, int)
                if sized and len(sequence) * count > MAX_ITEMS:
                    raise SpecError(
                        f"sweep expression {_clip(self.text)} gives over {MAX_ITEMS:,} items"
                    )
        if op is ast.Mod and isinstance(left, str):
            raise SpecError(f"sweep expression {self.text!r}: % formats no strings here")
        return self._bounded(_BINARY[op](left, right))

    def _eval(self, node: ast.expr, values: Mapping[str, Any]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name | ast.Attribute):
            return lookup(values, _dotted(node) or "")
        if isinstance(node, ast.List | ast.Tuple):
            return [self._eval(e, values) for e in node.elts]
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, values), self._eval(node.right, values)
            return self._binary(type(node.op), left, right)
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](self._eval(node.operand, values))
        if isinstance(node, ast.BoolOp):
            results = (self._eval(v, values) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, values)
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                right = self._eval(comparator, values)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            branch = node.body if self._eval(node.test, values) else node.orelse
            return self._eval(branch, values)
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            arguments = [self._eval(a, values) for a in node.args]
            return self._bounded(FUNCTIONS[node.func.id](*arguments))
        raise SpecError(f"sweep expression {self.text!r}: unsupported syntax")  # pragma: no cover
