"""Small display helpers shared by the console's pages."""

import base64

from workers.http import MAGIC


def data_uri(data: bytes | None) -> str:
    """An image as a ``data:`` URI (allowed by the console's CSP), typed by its magic bytes."""
    if not data:
        return ""
    data = bytes(data)
    mime = next((t for t, signatures in MAGIC.items() if any(data.startswith(s) for s in signatures)), "image/png")
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"
