"""A pool's supervisor: django-q2's Sentinel with hand-offs no dead process can block, and the healing
around it. ``main.py`` is the pool's main process, ``sentinel.py`` the supervisor that owns the
processes; it uses the channels (``handoff.py``), the rescuer of dead workers' jobs (``rescue.py``),
the stall watch (``stalls.py``) and bounded database calls (``database.py``)."""
