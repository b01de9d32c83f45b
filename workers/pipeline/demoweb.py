"""The demo web: two small local sites for the crawl and analysis pipeline to work on.

The demo (``manage.py demoweb``) and the tests start it; nothing here is used in production. Every
image is generated from a seed, so the protected assets the demo registers and the copies the sites
show are the same on every machine:

- exact copies of protected assets, resized and recompressed copies (→ match), unrelated images
  (→ no match), and blends of an asset with another picture (→ borderline: a reviewer decides);
- a ``robots.txt`` that disallows ``/private/`` (→ the crawl job is skipped with its reason), and one
  that names a sitemap listing a page no link reaches;
- a slow page, a page that answers 503 with ``Retry-After`` twice and then 200, and a page (with its
  image) that disappears — 404 — after ``vanish_after`` seconds (the rechecks follow it).
"""

from __future__ import annotations

import hashlib
import io
import random
import threading
import time
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import Image, ImageDraw, ImageOps

# Every page and image of the demo sites is as old as this (their content never changes).
LAST_MODIFIED = "Mon, 30 Nov 2026 08:00:00 GMT"
# The protected originals: (seed, name, owner reference).
ASSETS = (
    (1, "Abendlicht über dem Hafen", "RH-1001"),
    (2, "Mohnfeld", "RH-1002"),
    (3, "Kreise in Blau", "RH-1003"),
    (5, "Stadt bei Nacht", "RH-1004"),
)


def artwork(seed: int, size: tuple[int, int] = (480, 320)) -> Image.Image:
    """A deterministic picture: a colour gradient with a dozen shapes."""
    rnd = random.Random(seed)
    width, height = size
    image = Image.new("RGB", size)
    draw = ImageDraw.Draw(image)
    left, right = [rnd.randrange(256) for _ in range(3)], [rnd.randrange(256) for _ in range(3)]
    for x in range(width):
        draw.line([(x, 0), (x, height)], fill=tuple(int(a + (b - a) * x / width) for a, b in zip(left, right)))
    for _ in range(12):
        x0, y0 = rnd.randrange(width), rnd.randrange(height)
        box = [x0, y0, x0 + rnd.randrange(40, 200), y0 + rnd.randrange(40, 160)]
        fill = tuple(rnd.randrange(256) for _ in range(3))
        (draw.ellipse if rnd.random() < 0.5 else draw.rectangle)(box, fill=fill)
    return image


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def asset_png(seed: int) -> bytes:
    return encode(artwork(seed), "PNG")


def _recompressed(seed: int, scale: float, quality: int) -> bytes:
    original = artwork(seed)
    return encode(original.resize((int(original.width * scale), int(original.height * scale))), "JPEG", quality=quality)


def _mirrored(seed: int) -> bytes:
    return encode(ImageOps.mirror(artwork(seed)).resize((400, 267)), "JPEG", quality=70)


def _cropped(seed: int) -> bytes:
    """A repost's crop: a sixth of each side off, turned by 4° on a white ground."""
    original = artwork(seed)
    crop = original.crop((40, 25, 440, 295)).rotate(4, resample=Image.Resampling.BILINEAR, fillcolor="white")
    return encode(crop, "JPEG", quality=80)


def _blend(seed: int, other: int, alpha: float) -> bytes:
    return encode(Image.blend(artwork(seed), artwork(other), alpha), "JPEG", quality=80)


@cache
def images() -> dict[str, tuple[str, bytes]]:
    """Every image the sites serve, by path, with its content type. The comment says what analysis finds."""
    return {
        "/img/abendlicht.png": ("image/png", asset_png(1)),  # exact copy → match
        "/img/mohnfeld-klein.jpg": ("image/jpeg", _recompressed(2, 0.6, 35)),  # resized, recompressed → match
        "/img/logo.png": ("image/png", encode(artwork(101, (240, 160)), "PNG")),  # unrelated → no match
        "/img/kreise-collage.jpg": ("image/jpeg", _blend(3, 103, 0.45)),  # blend → borderline
        "/img/foto-204.jpg": ("image/jpeg", encode(artwork(104), "JPEG", quality=85)),  # unrelated
        "/img/abendlicht-gespiegelt.jpg": ("image/jpeg", _mirrored(1)),  # mirrored → match (analysis@1 missed it)
        "/img/mohnfeld-ausschnitt.jpg": ("image/jpeg", _cropped(2)),  # cropped, turned → match by its keypoints
        "/img/stadt.webp": ("image/webp", encode(artwork(5).resize((360, 240)), "WEBP", quality=60)),  # → match
        "/img/abendlicht-kopie.jpg": ("image/jpeg", _recompressed(1, 0.8, 50)),  # → match
        "/img/hafen-mix.jpg": ("image/jpeg", _blend(1, 107, 0.45)),  # blend → borderline
        "/img/verschwindet.jpg": ("image/jpeg", _recompressed(2, 1.0, 90)),  # → match, then gone
        "/img/intern.png": ("image/png", asset_png(5)),  # behind robots.txt: never fetched
    }


def _page(title: str, body: str) -> bytes:
    return (
        f'<!doctype html><html lang="de"><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body><h1>{title}</h1>{body}</body></html>"
    ).encode()


def _gallery(title: str, image_paths: list[str], links: list[str] = ()) -> bytes:
    figures = "".join(f'<figure><img src="{path}" alt=""></figure>' for path in image_paths)
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return _page(title, f"{figures}<ul>{anchors}</ul>")


def _sitemap(host: str, paths: list[str]) -> bytes:
    entries = "".join(f"<url><loc>http://{host}{path}</loc><lastmod>2026-11-30</lastmod></url>" for path in paths)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
    ).encode()


# What each site serves: path → (status, content type, body) or a special behaviour.
SITE_A = {
    "name": "Galerie Nord",
    "robots": b"User-agent: *\nDisallow: /private/\n",
    "pages": {
        "/": _gallery(
            "Galerie Nord",
            ["/img/logo.png"],
            ["/werke/1.html", "/werke/2.html", "/private/intern.html", "https://elsewhere.example/"],
        ),
        "/werke/1.html": _gallery("Werke I", ["/img/abendlicht.png", "/img/mohnfeld-klein.jpg", "/img/logo.png"]),
        "/werke/2.html": _gallery(
            "Werke II",
            [
                "/img/kreise-collage.jpg",
                "/img/foto-204.jpg",
                "/img/abendlicht-gespiegelt.jpg",
                "/img/mohnfeld-ausschnitt.jpg",
            ],
            ["/werke/1.html"],
        ),
        "/private/intern.html": _gallery("Intern", ["/img/intern.png"]),
    },
}
SITE_B = {
    "name": "Bildarchiv Süd",
    "robots": b"User-agent: *\nAllow: /\nSitemap: /sitemap.xml\n",
    # Its /sitemap.xml lists these (one page no link reaches: the crawl finds it by the sitemap).
    "sitemap": ["/archiv/langsam.html", "/archiv/nur-im-sitemap.html"],
    "pages": {
        "/": _gallery(
            "Bildarchiv Süd",
            ["/img/stadt.webp"],
            ["/archiv/langsam.html", "/archiv/wackelig.html", "/archiv/verschwindet.html", "/archiv/fehlt.html"],
        ),
        "/archiv/langsam.html": _gallery("Langsam", ["/img/abendlicht-kopie.jpg"]),
        "/archiv/wackelig.html": _gallery("Wackelig", ["/img/hafen-mix.jpg", "/img/foto-204.jpg"]),
        "/archiv/verschwindet.html": _gallery("Verschwindet bald", ["/img/verschwindet.jpg"]),
        "/archiv/nur-im-sitemap.html": _gallery("Nur im Sitemap", ["/img/stadt.webp"]),
    },
}
SLOW_PATH = "/archiv/langsam.html"
FLAKY_PATH = "/archiv/wackelig.html"
VANISHING_PATHS = ("/archiv/verschwindet.html", "/img/verschwindet.jpg")
FLAKY_FAILURES = 2


@dataclass
class Site:
    spec: dict
    slow_seconds: float
    vanish_after: float
    started: float = field(default_factory=time.monotonic)
    flaky_left: int = FLAKY_FAILURES
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[tuple[float, str]] = field(default_factory=list)
    # The names of every header any request carried (lower case): what a crawled site learns.
    header_names: set[str] = field(default_factory=set)
    latency_seconds: float = 0.0  # every answer waits this long first, like a real site's response time

    def answer(self, path: str, request_headers=None) -> tuple[int, dict, bytes]:
        """The answer to a GET of ``path``; a 200 carries an ETag and a Last-Modified, and a request
        whose ``If-None-Match`` or ``If-Modified-Since`` still holds is answered ``304`` without a body."""
        if request_headers is not None:
            with self.lock:
                self.header_names.update(name.lower() for name in request_headers.keys())
        if path == "/sitemap.xml" and "sitemap" in self.spec:
            host = (request_headers or {}).get("Host", "")
            with self.lock:
                self.requests.append((time.monotonic(), path))
            return 200, {"Content-Type": "application/xml"}, _sitemap(host, self.spec["sitemap"])
        status, headers, body = self._answer(path)
        if status != 200:
            return status, headers, body
        validators = {"ETag": f'"{hashlib.sha256(body).hexdigest()[:32]}"', "Last-Modified": LAST_MODIFIED}
        asked = request_headers or {}
        if asked.get("If-None-Match") == validators["ETag"] or (
            "If-None-Match" not in asked and asked.get("If-Modified-Since") == LAST_MODIFIED
        ):
            return 304, validators, b""
        return status, {**headers, **validators}, body

    def _answer(self, path: str) -> tuple[int, dict, bytes]:
        path = path.split("?", 1)[0]
        with self.lock:
            self.requests.append((time.monotonic(), path))
        if self.latency_seconds:
            time.sleep(self.latency_seconds)
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, self.spec["robots"]
        if path in VANISHING_PATHS and time.monotonic() - self.started > self.vanish_after:
            return 404, {"Content-Type": "text/html"}, _page("Nicht gefunden", "")
        if path == FLAKY_PATH and path in self.spec["pages"]:
            with self.lock:
                if self.flaky_left > 0:
                    self.flaky_left -= 1
                    return 503, {"Content-Type": "text/html", "Retry-After": "1"}, _page("Überlastet", "")
        if path == SLOW_PATH and path in self.spec["pages"]:
            time.sleep(self.slow_seconds)
        if path in self.spec["pages"]:
            return 200, {"Content-Type": "text/html; charset=utf-8"}, self.spec["pages"][path]
        if path in images():
            content_type, body = images()[path]
            return 200, {"Content-Type": content_type}, body
        return 404, {"Content-Type": "text/html"}, _page("Nicht gefunden", "")


def _handler_for(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "DemoWeb/1"

        def do_GET(self):  # noqa: N802 (the standard library's name)
            status, headers, body = site.answer(self.path, self.headers)
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # quiet: the pipeline's step events say what happened
            pass

    return Handler


class DemoWeb:
    """Both demo sites, each on its own port (so per-host politeness applies to each separately)."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        ports: tuple[int, int] = (0, 0),
        slow_seconds: float = 2.0,
        vanish_after: float = 600.0,
    ) -> None:
        self.sites = [Site(SITE_A, slow_seconds, vanish_after), Site(SITE_B, slow_seconds, vanish_after)]
        self.servers = [ThreadingHTTPServer((host, port), _handler_for(site)) for site, port in zip(self.sites, ports)]
        for server in self.servers:
            server.daemon_threads = True
        self.threads: list[threading.Thread] = []

    @property
    def targets(self) -> list[str]:
        """The exact host:port pairs to allow-list for the safe HTTP client."""
        return [f"{server.server_address[0]}:{server.server_address[1]}" for server in self.servers]

    def base_url(self, index: int) -> str:
        return f"http://{self.targets[index]}/"

    def sources(self) -> list[dict]:
        """The crawl sources that point at these sites."""
        return self.source_specs(self.targets)

    @staticmethod
    def source_specs(targets: list[str]) -> list[dict]:
        """The crawl sources for demo sites served at these two host:port pairs."""
        return [
            {"name": SITE_A["name"], "base_url": f"http://{targets[0]}/", "max_depth": 2, "priority": 4},
            {"name": SITE_B["name"], "base_url": f"http://{targets[1]}/", "max_depth": 1, "priority": 6},
        ]

    def start(self) -> DemoWeb:
        for server in self.servers:
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> DemoWeb:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def protected_assets() -> list[tuple[str, str, bytes]]:
    """(name, owner reference, PNG bytes) of the originals the demo registers."""
    return [(name, owner, asset_png(seed)) for seed, name, owner in ASSETS]
