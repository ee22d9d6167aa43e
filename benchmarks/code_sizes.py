"""Function and module sizes of a package: median, p95 and how many are over a line limit.

    python benchmarks/code_sizes.py                 # profiler/, 80 lines
    python benchmarks/code_sizes.py profiler --over 80 --json

A function is every ``def`` (methods and nested functions included), counted from its first decorator
or ``def`` line to its last line; a module is every ``.py`` file, counted in lines. Reads source only:
nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
from pathlib import Path

OVER_LINES = 80
"""The size past which a function or module is counted as long."""


def function_sizes(tree: ast.AST) -> list[int]:
    """Lines of each function and method in a parsed module, decorators included."""
    sizes = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            sizes.append((node.end_lineno or node.lineno) - first + 1)
    return sizes


def percentile(values: list[int], share: float) -> float:
    """The ``share`` quantile by linear interpolation between the sorted values (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = share * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def describe(values: list[int], over: int) -> dict[str, float]:
    return {"count": len(values), "median": statistics.median(values) if values else 0.0,
            "p95": round(percentile(values, 0.95), 1), f"over_{over}": sum(v > over for v in values),
            "max": max(values, default=0)}


def measure(root: Path, over: int = OVER_LINES) -> dict[str, dict[str, float]]:
    """{"functions": ..., "modules": ...} over every .py file under ``root``."""
    functions: list[int] = []
    modules: list[int] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        modules.append(len(text.splitlines()))
        functions += function_sizes(ast.parse(text, filename=str(path)))
    return {"functions": describe(functions, over), "modules": describe(modules, over)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="profiler")
    parser.add_argument("--over", type=int, default=OVER_LINES)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args()
    found = measure(Path(args.root), args.over)
    if args.json:
        print(json.dumps(found, indent=1))
        return
    for kind, d in found.items():
        print(f"{kind:<9} count {d['count']:>5}  median {d['median']:>5g}  p95 {d['p95']:>6g}  "
              f"over {args.over}: {d[f'over_{args.over}']:>4}  max {d['max']}")


if __name__ == "__main__":
    main()
