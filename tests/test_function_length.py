"""Functions, not files, are capped: no function or method in ``sweeper/`` or ``workloads/`` spans more than
``MAX_LINES`` lines, from its first decorator to its last line (docstring and comments included).

Ruff has no line-count rule; its complexity and statement bounds (``C901``, ``PLR0915`` in pyproject.toml, the
lint step of ``.ci/run``) catch a function with too many branches or statements, this test one that is merely
long. A long function is split into named helpers that read as its steps, never packed into fewer lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPPED = ("sweeper", "workloads")
MAX_LINES = 60


def long_functions(root: Path = ROOT, max_lines: int = MAX_LINES) -> dict[str, str]:
    """``{"path::name": "path:line name spans N lines"}`` for every function over ``max_lines`` under ``CAPPED``."""
    found = {}
    for package in CAPPED:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                span = node.end_lineno - first + 1
                if span > max_lines:
                    found[f"{rel}::{node.name}"] = f"{rel}:{first} {node.name} spans {span} lines"
    return found


def test_no_function_over_the_cap() -> None:
    offenders = list(long_functions().values())
    assert not offenders, f"over {MAX_LINES} lines (split into named steps):\n" + "\n".join(offenders)


def test_a_long_function_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    """Decorators and the docstring count; a nested function or a method is checked like any other."""
    body = "\n".join(f"    x{i} = {i}" for i in range(56))
    source = (
        f'@staticmethod\n@property\ndef f():\n    """Doc."""\n{body}\n\n\nclass C:\n    def m(self):\n        pass\n'
    )
    (tmp_path / "sweeper").mkdir()
    (tmp_path / "workloads").mkdir()
    (tmp_path / "sweeper" / "long.py").write_text(source, encoding="utf-8")  # f: 2 + 1 + 1 + 56 = 60 lines
    assert long_functions(tmp_path) == {}
    nested = "def outer():\n    def inner():\n" + "\n".join(f"        y{i} = {i}" for i in range(60)) + "\n"
    (tmp_path / "workloads" / "nested.py").write_text(nested, encoding="utf-8")
    (tmp_path / "sweeper" / "long.py").write_text(source.replace("    x0 = 0\n", "    x0 = 0\n    x = 1\n"))
    assert long_functions(tmp_path) == {
        "sweeper/long.py::f": "sweeper/long.py:1 f spans 61 lines",
        "workloads/nested.py::outer": "workloads/nested.py:1 outer spans 62 lines",
        "workloads/nested.py::inner": "workloads/nested.py:2 inner spans 61 lines",
    }
