"""Which modules of a package import Django's settings (``django.conf`` in any spelling)."""

import ast
from pathlib import Path


def settings_readers(package: Path, *, exempt: tuple[str, ...] = ()) -> list[str]:
    """``file: import`` for each import of ``django.conf`` under ``package`` (``migrations`` and the
    file names in ``exempt`` left out)."""
    readers = []
    for path in sorted(package.rglob("*.py")):
        if "migrations" in path.parts or path.name in exempt:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "django":
                names = [f"django.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            readers += [
                f"{path.relative_to(package.parent)}: {name}" for name in names if name.startswith("django.conf")
            ]
    return readers
