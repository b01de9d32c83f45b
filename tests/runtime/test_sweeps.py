"""The sweeps' registry (workers/runtime/sweeps.py): every sweep the control process runs is a unit —
``run_once`` of a ``*_sweep`` module with its config — with a test file named after it, and the
tests mirror the code's layers."""

from functools import partial
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from workers.runtime.sweeps import Stage, require_number, sweeps

ROOT = Path(__file__).resolve().parents[2]
# Where a layer's sweeps live, and where their tests do.
UNITS = {
    "workers/runtime": "tests/runtime",
    "workers/pipeline": "tests/pipeline",
    "rechecks": "tests/rechecks",
    "dashboard/operations": "tests/console",
}


def test_every_registered_sweep_is_a_unit_with_its_config():
    for sweep in sweeps.in_order():
        assert isinstance(sweep.function, partial), f"{sweep.name} is a bare function"
        assert sweep.function.func.__name__ == "run_once", sweep.name
        assert sweep.function.func.__module__.endswith("_sweep"), sweep.name
        (config,) = sweep.function.args
        assert sweep.every_seconds == config.every_seconds, sweep.name
    assert len(sweeps.in_order()) == 18
    assert [s.stage for s in sweeps.in_order()] == sorted(s.stage for s in sweeps.in_order())
    assert sweeps.in_order()[0].name == "reaper" and sweeps.in_order()[0].stage == Stage.ENGINE


def test_every_sweep_module_has_a_test_file_named_after_it():
    missing = []
    for code, tests in UNITS.items():
        for module in sorted((ROOT / code).glob("*_sweep.py")):
            if not (ROOT / tests / f"test_{module.name}").exists():
                missing.append(f"{code}/{module.name}: no {tests}/test_{module.name}")
    assert missing == []


def test_the_tests_mirror_the_layers_with_no_loose_files():
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    layers = {"engine", "runtime", "pipeline", "rechecks", "api", "alerts", "history", "console", "config", "devtools"}
    assert folders == layers | {"processes", "browser", "support"}
    assert sorted(p.name for p in (ROOT / "tests").glob("test_*.py")) == []


def test_a_number_is_required_by_the_setting_s_name():
    require_number(3, "LEITSTAND_X", minimum=1, whole=True)
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_X must be a whole number of at least 1, not True"):
        require_number(True, "LEITSTAND_X", minimum=1, whole=True)
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_X must be a number of at least 0.5, not 0.2"):
        require_number(0.2, "LEITSTAND_X", minimum=0.5)
