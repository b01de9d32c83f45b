# Sourced by scripts/demo and scripts/test: creates the virtual environment with the pinned
# dependencies (.venv, or LEITSTAND_VENV, e.g. one per Python version) and sets $PY to its Python.
# LEITSTAND_DJANGO chooses Django: 5.2 (the LTS, the default; pyproject.toml's extra django52, with
# the django-tasks backport) or 6.0 (extra django60, Python >= 3.12). Re-installs only when
# pyproject.toml or the chosen Django changed, so repeated runs start at once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=${LEITSTAND_VENV:-.venv}
DJANGO_SERIES=${LEITSTAND_DJANGO:-5.2}
case "$DJANGO_SERIES" in
    5.2) django_extra=django52 min_python=11 ;;
    6.0) django_extra=django60 min_python=12 ;;
    *)
        echo "LEITSTAND_DJANGO is 5.2 (the default, Django 5.2 LTS) or 6.0 (Django 6.0, Python >= 3.12), got '$DJANGO_SERIES'." >&2
        exit 1
        ;;
esac
if ! "$PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; then
    echo "Leitstand needs Python 3.11, 3.12 or 3.13 (found: $("$PYTHON" --version 2>&1)). Set PYTHON=/path/to/python3." >&2
    exit 1
fi
if ! "$PYTHON" -c "import sys; sys.exit(sys.version_info[:2] < (3, $min_python))"; then
    echo "Django $DJANGO_SERIES needs Python >= 3.$min_python (found: $("$PYTHON" --version 2>&1)). Set PYTHON=/path/to/python3.12 or 3.13, or LEITSTAND_DJANGO=5.2." >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
if ! "$PY" -c "import sys; sys.exit(sys.version_info[:2] < (3, $min_python))"; then
    echo "$VENV was made with $("$PY" --version 2>&1), but Django $DJANGO_SERIES needs Python >= 3.$min_python: name another LEITSTAND_VENV, or remove $VENV." >&2
    exit 1
fi
stamp="$VENV/.installed-django$DJANGO_SERIES-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "==> installing pinned dependencies (Django $DJANGO_SERIES)"
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet --editable ".[test,$django_extra]"
    if [ "$DJANGO_SERIES" != 5.2 ]; then
        # Django's own django.tasks, not the 5.2 backport an earlier install may have left here.
        "$PY" -m pip uninstall --quiet --yes django-tasks 2>/dev/null || true
    fi
    rm -f "$VENV"/.installed-*
    touch "$stamp"
fi
