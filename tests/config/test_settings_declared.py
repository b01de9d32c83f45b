"""Every setting is declared once (issue 55): config/settings.py (and the web server's
config/gunicorn_conf.py) reads each ``LEITSTAND_*`` variable from the environment in one place, with
its type, default, bounds and one line of documentation; docs/operations.md's settings table is
made from those declarations; the typed options and the sweeps' configs built from the settings keep
no default of their own, so a default is written nowhere else."""

import ast
from pathlib import Path

from config.settings_table import DECLARING, declarations, table

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("config", "jobs", "workers", "rechecks", "api", "alerts", "history", "dashboard")
READERS = {"env_int", "env_float", "env_bool", "env_str", "env_list", "env_json"}


def _product_files():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def _reads(tree) -> list[str]:
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in READERS
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


def test_each_variable_is_read_from_the_environment_once_and_only_where_it_is_declared():
    reads = [name for path in DECLARING for name in _reads(ast.parse(path.read_text()))]
    assert len(reads) > 150
    assert sorted({name for name in reads if reads.count(name) > 1}) == [], "read twice: two defaults"
    elsewhere = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _product_files()
        if path not in DECLARING
        for name in _reads(ast.parse(path.read_text()))
    ]
    assert elsewhere == []


def test_every_declaration_documents_itself_and_the_operations_guide_shows_them_all():
    declared = declarations()
    assert all(d.doc.strip() and "\n" not in d.doc for d in declared), "one line of documentation each"
    assert {d.name for d in declared} == {name for path in DECLARING for name in _reads(ast.parse(path.read_text()))}
    guide = (ROOT / "docs" / "operations.md").read_text()
    begin = "<!-- settings-table: begin (python -m config.settings_table) -->\n"
    shown = guide[guide.index(begin) + len(begin) : guide.index("<!-- settings-table: end -->")]
    assert shown == table(), "run: python -m config.settings_table, and put it into docs/operations.md"


def _fed(cls: ast.ClassDef) -> set[str]:
    """The fields a ``from_settings`` or ``from_options`` fills ('**' when it passes a mapping)."""
    fed = set()
    for method in cls.body:
        if isinstance(method, ast.FunctionDef) and method.name in ("from_settings", "from_options"):
            for call in ast.walk(method):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "cls":
                    fed |= {keyword.arg or "**" for keyword in call.keywords}
    return fed


def test_the_options_and_the_sweeps_configs_keep_no_default_of_a_setting():
    checked, defaults = 0, []
    for path in _product_files():
        for cls in (node for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)):
            fed = _fed(cls)
            for field in cls.body:
                if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and fed:
                    checked += 1
                    if field.value is not None and (field.target.id in fed or "**" in fed):
                        defaults.append(f"{path.relative_to(ROOT)}: {cls.name}.{field.target.id}")
    assert checked > 80, "the scan found the options' fields"
    assert defaults == [], "a setting's default is config/settings.py's alone"
