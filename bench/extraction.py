"""What reading a page costs: today's extractor against the one before issue 53, on the same pages.

Run: .venv/bin/python -m bench.extraction [--rounds 30]
(no database: the extractor is pure Python).

Pages: the issue's corpus (44 pages, one image each, as CMSs, shops and lazy loaders write them),
the simulated web's page (`bench/simweb.py`: two images, a few links), and a large shop page (made
here: 120 product tiles with lazy srcsets, 400 links, a 20 KB JSON-LD block, a 40 KB `<style>` block,
inline backgrounds; about 300 KB). The **bound** is the bare tokenisation of the same text by the
same parser (``html.parser.HTMLParser`` with no handlers): no extractor reading that parser can be
faster. The **baseline** is the extractor at commit 3c32441 (issue 53's start), loaded from git in
the same run. Reported: milliseconds per page (best of ``--rounds``), images found, and the ratios.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import django

BASELINE_COMMIT = "3c32441"
ROOT = Path(__file__).resolve().parent.parent


def _setup() -> None:
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LEITSTAND_DEBUG", "true")
    # Reading pages touches no database; the settings still want one named (never connected to).
    os.environ.setdefault("DATABASE_URL", "postgresql://leitstand_app@localhost/leitstand")
    django.setup()


def baseline_extract():
    """The extractor as it was at BASELINE_COMMIT, imported from git's copy of its module."""
    source = subprocess.run(
        ["git", "show", f"{BASELINE_COMMIT}:workers/pipeline/extraction.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "extraction_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("extraction_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module.extract


def shop_page() -> bytes:
    tiles = "".join(
        f'<li class="product" style="background-image:url(/img/bg-{i}.jpg)"><a href="/p/{i}.html">'
        f'<img class="lazyload" src="data:image/gif;base64,R0lGODlhAQABAAAAACH5BAEKAAEALAAAAAABAAEAAAICTAEAOw==" '
        f'data-srcset="/img/p{i}-300.jpg 300w, /img/p{i}-600.jpg 600w, /img/p{i}-1200.jpg 1200w" '
        f'data-src="/img/p{i}-600.jpg" alt="Product {i}"></a><span class="price">{i},99 €</span></li>'
        for i in range(120)
    )
    links = "".join(f'<a href="/category/{i}?page=2&amp;sort=price">Category {i}</a>' for i in range(400))
    graph = {
        "@context": "https://schema.org",
        "@graph": [
            {"@type": "Product", "name": f"Product {i}", "image": [f"/img/p{i}-1200.jpg"], "sku": f"SKU-{i:05d}"}
            for i in range(120)
        ],
    }
    style = "".join(
        f".tile-{i}{{margin:0 {i % 7}px;color:#333;font:14px/1.4 sans-serif}}"
        f"@media (min-width:{600 + i}px){{.hero-{i}{{background:url(/img/hero-{i}.jpg) center/cover}}}}"
        for i in range(300)
    )
    return (
        '<!doctype html><html><head><meta charset="utf-8"><meta property="og:image" content="/img/share.jpg">'
        f'<script type="application/ld+json">{json.dumps(graph)}</script><style>{style}</style>'
        "<script>window.dataLayer=[];" + "var x=1;" * 2000 + "</script></head>"
        f"<body><nav>{links}</nav><ul>{tiles}</ul>" + "<p>Lorem ipsum dolor sit amet. </p>" * 1500 + "</body></html>"
    ).encode()


class _Bare(HTMLParser):
    pass


def bare(body: bytes, *, base_url: str) -> None:
    parser = _Bare(convert_charrefs=True)
    parser.feed(body.decode("utf-8", "replace").replace("\x00", ""))
    parser.close()


def best_of(function, body: bytes, base_url: str, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        function(body, base_url=base_url)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    _setup()
    from bench.simweb import page as simweb_page
    from tests.support.image_corpus import PATTERNS
    from tests.support.image_corpus import page as corpus_page
    from workers.pipeline.extraction import extract

    before = baseline_extract()
    sets = {
        "corpus (44 pages, summed)": [(corpus_page(name), f"http://shop.example/{name}.html") for name in PATTERNS],
        "simulated web page": [(simweb_page(3, 20), "http://127.0.1.1:8200/p/3")],
        "large shop page": [(shop_page(), "http://shop.example/category/1.html")],
    }
    print(f"python {sys.version.split()[0]}; best of {args.rounds} rounds; baseline: extractor at {BASELINE_COMMIT}")
    header = (
        f"{'pages':30} {'KB':>6} {'bare ms':>8} {'before ms':>10} {'today ms':>9} {'today ÷ before':>15} "
        f"{'bare ÷ today':>13} {'images before':>14} {'images today':>13}"
    )
    print(header)
    print("-" * len(header))
    for label, pages in sets.items():
        size = sum(len(body) for body, _ in pages) / 1024
        bare_ms = sum(best_of(bare, body, url, args.rounds) for body, url in pages)
        before_ms = sum(best_of(before, body, url, args.rounds) for body, url in pages)
        today_ms = sum(best_of(extract, body, url, args.rounds) for body, url in pages)
        found_before = sum(len(before(body, base_url=url).images) for body, url in pages)
        found_today = sum(len(extract(body, base_url=url).images) for body, url in pages)
        print(
            f"{label:30} {size:6.1f} {bare_ms:8.2f} {before_ms:10.2f} {today_ms:9.2f} {today_ms / before_ms:15.2f} "
            f"{bare_ms / today_ms:13.2f} {found_before:14} {found_today:13}"
        )


if __name__ == "__main__":
    main()
