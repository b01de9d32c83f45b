"""The console's own pages, one module each; ``dashboard.site.ConsoleSite`` only mounts them. A page
parses the request, checks the permission, calls one service or selector and renders the result
(``common.py``: the permission check, the actor, the frame every console page shares)."""
