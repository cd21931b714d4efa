"""Expressions over dotted config keys (``hydra.sweeper.conditions`` and ``constraints``): parsed with ``ast``,
checked once at parse time (names, size, nesting, constants) and evaluated with a whitelist of operators; nothing
else is executed. An evaluation error is an :class:`ExpressionError`, never a crash of the sweep.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Mapping
from typing import Any

from sweeper.errors import ConfigError


def check_known(key: str, defaults: Mapping[str, Any], where: str | None = None) -> None:
    """A one-line error unless ``key`` is a config key; ``where`` names the setting that wrote it (default: key)."""
    if key in defaults:
        return
    from sweeper.results.keys import suggest_key

    raise ConfigError(where or key, "is not a key of this workload's config", suggest_key(key, list(defaults)))


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


@functools.lru_cache(maxsize=1024)
def _names(expr: str) -> frozenset[str]:
    tree = ast.parse(expr, mode="eval")
    return frozenset(d for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute)) and (d := _dotted(n)))


class ExpressionError(ValueError):
    """An expression failed while evaluated (division by zero, a type error, a value past the size limits)."""


# Bounds on an expression's cost, checked when it is parsed (text, syntax tree) and while it is evaluated (values).
MAX_EXPR_CHARS, MAX_EXPR_NODES, MAX_EXPR_DEPTH = 1000, 200, 30
MAX_INT, MAX_LEN = 10**18, 10_000


def _depth(node: ast.AST) -> int:
    return 1 + max((_depth(c) for c in ast.iter_child_nodes(node)), default=0)


# The syntax an expression may use (besides names and dotted names): comparisons, and/or/not, arithmetic, constants.
_ALLOWED_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.Compare,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.BinOp,
    ast.Load,
    *_BINOPS,
    *_CMPOPS,
)


def _check_expression(key: str, expr: str, defaults: Mapping[str, Any]) -> None:
    """``expr`` (at config key ``key``) is a small expression of allowed syntax over known config keys, with small
    constants, that evaluates with ``defaults`` where they give every value it reads."""
    tree = _parse(key, expr)
    _check_syntax(key, expr, tree)
    top_level = _check_names(key, tree, defaults)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and not _small(node.value):
            raise ConfigError(
                key,
                f"the constant {str(node.value)[:40]!r} is too large",
                f"use numbers below {MAX_INT:.0e} and strings under {MAX_LEN} characters",
            )
    if all(defaults.get(n) is not None for n in top_level):  # every value known now: it must evaluate
        try:
            evaluate(expr, defaults)
        except ExpressionError as e:
            raise ConfigError(
                key,
                f"{str(expr)[:80]!r} cannot be evaluated with the defaults ({e})",
                "fix the expression (e.g. no division by zero, compare numbers with numbers)",
            ) from None


def _parse(key: str, expr: str) -> ast.Expression:
    """The syntax tree of ``expr``, within the bounds on its text, terms and nesting."""
    if len(str(expr)) > MAX_EXPR_CHARS:
        raise ConfigError(
            key,
            f"the expression has {len(str(expr))} characters, more than {MAX_EXPR_CHARS}",
            "write a shorter expression, or split it into several constraints",
        )
    try:
        tree = ast.parse(str(expr), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as e:
        raise ConfigError(
            key,
            f"{str(expr)[:80]!r} is not an expression ({getattr(e, 'msg', type(e).__name__)})",
            'write e.g. "knobs.num_workers > 0"',
        ) from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_EXPR_NODES or _depth(tree) > MAX_EXPR_DEPTH:
        raise ConfigError(
            key,
            f"the expression is too large ({nodes} terms, nesting {_depth(tree)}; at most "
            f"{MAX_EXPR_NODES} and {MAX_EXPR_DEPTH})",
            "split it into several constraints",
        )
    return tree


def _check_syntax(key: str, expr: str, tree: ast.Expression) -> None:
    """Every node of ``tree`` is a name, a dotted name or of ``_ALLOWED_NODES``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
            continue
        if isinstance(node, ast.Name):
            continue
        if not isinstance(node, _ALLOWED_NODES):
            raise ConfigError(
                key,
                f"{expr!r} uses {type(node).__name__}, which is not allowed",
                "use comparisons, and/or/not, arithmetic, constants and dotted knob names",
            )


def _check_names(key: str, tree: ast.Expression, defaults: Mapping[str, Any]) -> set[str]:
    """The config keys ``tree`` reads (the longest dotted names), each known to the defaults."""
    leaf_names = {d for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute)) and (d := _dotted(n))}
    top_level = {d for d in leaf_names if not any(o != d and o.startswith(d + ".") for o in leaf_names)}
    for name in top_level:
        if name not in defaults:
            try:
                check_known(name, defaults)
            except ConfigError as e:
                raise ConfigError(key, f"refers to `{name}`, which {e.problem}", e.fix) from None
    return top_level


def _small(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_INT
    if isinstance(value, float):
        return not value == value or abs(value) <= MAX_INT or value in (float("inf"), float("-inf"))
    if isinstance(value, (str, bytes, tuple)):
        return len(value) <= MAX_LEN
    return True


def evaluate(expr: str, values: Mapping[str, Any]) -> Any:
    """Evaluate a validated expression; names are dotted config keys looked up in ``values``. Any failure (division
    by zero, a type error, a result past the size limits) raises ``ExpressionError`` with one line saying why."""
    try:
        return _evaluate(expr, values)
    except ExpressionError:
        raise
    except (ArithmeticError, TypeError, ValueError, KeyError, RecursionError, MemoryError) as e:
        raise ExpressionError(f"{type(e).__name__}: {e}"[:200]) from None


def _binop(op: ast.operator, left: Any, right: Any) -> Any:
    """``left <op> right``, refused where it would build text or a sequence past the size limits."""
    if isinstance(op, ast.Mod) and isinstance(left, (str, bytes)):
        # '%0999999999d' % 1 would build a gigabyte before any size check: text formatting is refused
        raise ExpressionError("% formats text here, which expressions do not allow (use it on numbers)")
    if isinstance(op, ast.Mult) and any(isinstance(v, (str, tuple)) for v in (left, right)):
        n = right if isinstance(left, (str, tuple)) else left
        size = len(left if isinstance(left, (str, tuple)) else right)
        if isinstance(n, int) and n * size > MAX_LEN:
            raise ExpressionError(f"a repetition of {n} x {size} items is past the limit of {MAX_LEN}")
    result = _BINOPS[type(op)](left, right)
    if not _small(result):
        raise ExpressionError(f"a value past the limits ({MAX_INT:.0e}, {MAX_LEN} characters)")
    return result


def _compare(left: Any, ops: list[ast.cmpop], comparators: list[ast.expr], ev: Callable[[ast.AST], Any]) -> bool:
    """A chained comparison, each operand evaluated (``ev``) only when reached; false where two values do not
    compare."""
    for op, comp in zip(ops, comparators):
        right = ev(comp)
        try:
            if not _CMPOPS[type(op)](left, right):
                return False
        except TypeError:  # e.g. None > 0 for an inactive knob
            return False
        left = right
    return True


def _evaluate(expr: str, values: Mapping[str, Any]) -> Any:

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Name, ast.Attribute)):
            return values[_dotted(node)]
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(ev(e) for e in node.elts)
        if isinstance(node, ast.BoolOp):
            results = (ev(v) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return (not v) if isinstance(node.op, ast.Not) else -v
        if isinstance(node, ast.BinOp):
            return _binop(node.op, ev(node.left), ev(node.right))
        if isinstance(node, ast.Compare):
            return _compare(ev(node.left), node.ops, node.comparators, ev)
        raise ValueError(f"unsupported expression node {type(node).__name__}")

    return ev(ast.parse(str(expr), mode="eval"))
