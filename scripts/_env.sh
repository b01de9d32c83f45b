# Sourced by scripts/demo and scripts/test: creates the virtual environment with the pinned
# dependencies (.venv, or LEITSTAND_VENV, e.g. one per Python version) and sets $PY to its Python.
# Re-installs only when pyproject.toml changed, so repeated runs start at once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=${LEITSTAND_VENV:-.venv}
if ! "$PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; then
    echo "Leitstand needs Python 3.11, 3.12 or 3.13 (found: $("$PYTHON" --version 2>&1)). Set PYTHON=/path/to/python3." >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "==> installing pinned dependencies"
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet --editable ".[test]"
    rm -f "$VENV"/.installed-*
    touch "$stamp"
fi
