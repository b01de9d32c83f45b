"""docs/operations.md's settings table, made from the settings' declarations: every ``env_*`` call of
``config/settings.py`` (the application's) and ``config/gunicorn_conf.py`` (the web server's) names
its variable, type, default, least value and one line of documentation (``config/env.py``).

``python -m config.settings_table`` prints the table; tests/config/test_settings_declared.py keeps
docs/operations.md's copy (between its ``settings-table`` markers) equal to it.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from pathlib import Path

CONFIG = Path(__file__).resolve().parent
DECLARING = (CONFIG / "settings.py", CONFIG / "gunicorn_conf.py")
READERS = {
    "env_str": "text",
    "env_bool": "boolean",
    "env_int": "integer",
    "env_float": "number",
    "env_list": "comma-separated list",
    "env_json": "JSON",
}
_OPERATORS = {ast.Mult: operator.mul, ast.Add: operator.add, ast.Pow: operator.pow, ast.Sub: operator.sub}


@dataclass(frozen=True)
class Declared:
    name: str
    type: str
    default: str
    minimum: str
    doc: str
    source: str


def _number(node: ast.AST):
    """A default made of numbers and arithmetic (``14 * 86_400``), evaluated; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _number(node.left), _number(node.right)
        return None if left is None or right is None else _OPERATORS[type(node.op)](left, right)
    return None


def _shown(node: ast.AST | None, text: str) -> str:
    if node is None:
        return "empty"
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return f"`{str(node.value).lower()}`"
    if (number := _number(node)) is not None:
        return f"`{number}`"
    if isinstance(node, ast.Constant) and node.value in ("", None):
        return "empty"
    if isinstance(node, ast.Constant):
        return f"`{node.value}`"
    if isinstance(node, (ast.List, ast.Dict)) and not (node.elts if isinstance(node, ast.List) else node.keys):
        return "empty"
    return f"`{ast.get_source_segment(text, node)}`"


def declarations() -> list[Declared]:
    """Every declaration, in the order the files make them."""
    found = []
    for path in DECLARING:
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in READERS):
                continue
            keywords = {keyword.arg: keyword.value for keyword in node.keywords}
            default = node.args[1] if len(node.args) > 1 else keywords.get("default")
            minimum = keywords.get("minimum")
            found.append(
                Declared(
                    name=node.args[0].value,
                    type=READERS[node.func.id],
                    default=_shown(default, text),
                    minimum="—" if minimum is None else _shown(minimum, text),
                    doc=keywords["doc"].value,
                    source=f"{path.name}:{node.lineno}",
                )
            )
    return sorted(found, key=lambda d: (DECLARING.index(CONFIG / d.source.split(":")[0]), int(d.source.split(":")[1])))


def table() -> str:
    rows = ["| variable | type | default | least | meaning |", "| --- | --- | --- | --- | --- |"]
    for d in declarations():
        doc = d.doc.replace("|", "\\|")
        rows.append(f"| `{d.name}` | {d.type} | {d.default} | {d.minimum} | {doc} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")
