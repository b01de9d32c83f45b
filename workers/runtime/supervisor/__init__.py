"""A pool's supervisor: django-q2's Sentinel with hand-offs no dead process can block, and the healing
around it (``sentinel.py`` says what and why)."""
