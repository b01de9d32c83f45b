"""deploy/prometheus/alerts.yml passes `promtool check rules` and its unit tests (`promtool test
rules`), and names every metric it uses from the documented set."""

import re
import shutil
import subprocess

import pytest

from dashboard.operations.metrics import DOCUMENTED
from tests.support.db import PROJECT_ROOT

RULES = PROJECT_ROOT / "deploy" / "prometheus" / "alerts.yml"


@pytest.fixture(scope="module")
def promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: install Debian's prometheus package (scripts/test does, as root)")
    return path


def test_the_rules_pass_promtool_check(promtool):
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 11 rules found" in result.stdout


def test_the_rules_pass_their_unit_tests(promtool):
    result = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"], capture_output=True, text=True, cwd=RULES.parent
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_use_documented_metrics_and_existing_runbooks():
    text = RULES.read_text()
    used = set(re.findall(r"\b(leitstand_[a-z_]+)", text))
    assert used <= set(DOCUMENTED), used - set(DOCUMENTED)
    for runbook in re.findall(r'runbook_url: "([^"]+)"', text):
        assert (PROJECT_ROOT / runbook).exists(), runbook
