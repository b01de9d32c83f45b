"""The PHP client is a Composer package that validates as PHP teams expect: ``composer validate
--strict`` (Debian's composer) on clients/php/composer.json. Its PHPUnit suite runs against a live
server in tests/api/test_php_client.py."""

import os
import re
import subprocess
from pathlib import Path

PHP_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "php"


def test_the_php_client_is_a_valid_composer_package(tmp_path):
    run = subprocess.run(
        ["composer", "validate", "--strict", "--no-interaction"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PHP_CLIENT,
        env={**os.environ, "COMPOSER_HOME": str(tmp_path), "COMPOSER_ALLOW_SUPERUSER": "1"},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "./composer.json is valid" in run.stdout + run.stderr


def test_the_phpunit_suite_runs_without_a_server_and_skips_only_the_live_tests():
    env = {key: value for key, value in os.environ.items() if not key.startswith("LEITSTAND_")}
    run = subprocess.run(["phpunit"], capture_output=True, text=True, timeout=60, cwd=PHP_CLIENT, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    counted = re.search(r"^Tests: (\d+), Assertions: \d+, Skipped: (\d+)\.$", run.stdout, re.MULTILINE)
    live = len(re.findall(r"public function test", (PHP_CLIENT / "tests" / "LiveServerTest.php").read_text()))
    assert counted and int(counted[1]) > live and int(counted[2]) == live, run.stdout
