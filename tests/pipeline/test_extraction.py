"""What a crawl reads from a page (issue 53): every image a page shows, as the corpus of CMS, shop,
share-tag and lazy-loader markup writes it, srcset as the HTML standard parses it, each image once
with where it was found, and nothing that names no fetchable image."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.image_corpus import PATTERNS, page
from workers.pipeline.extraction import extract, srcset_parse, stylesheet_images
from workers.pipeline.http import url_canonical, url_normal

SITE = "http://shop.example"


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_pattern_of_the_corpus_is_found_where_it_is(name):
    pattern = PATTERNS[name]
    found = extract(page(name), base_url=f"{SITE}/{name}.html")
    by_url = {image.url: image for image in found.images}
    assert f"{SITE}{pattern.image}" in by_url, found.images
    image = by_url[f"{SITE}{pattern.image}"]
    assert image.found_in == pattern.found_in
    assert set(image.variants) >= {f"{SITE}{v}" for v in pattern.variants}
    # Nothing a page holds besides its image becomes a candidate: no placeholder, no script, no blank.
    assert all(url.startswith(f"{SITE}/img/") for url in found.image_urls), found.image_urls
    assert not [u for u in found.image_urls + found.links if "data:" in u or "javascript:" in u]
    assert found.ignored.get("javascript:") == 1 and found.ignored.get("empty", 0) >= 1


def test_srcset_is_parsed_as_the_html_standard_does():
    assert srcset_parse("a.jpg 480w, b.jpg 960w") == ([("a.jpg", 480.0), ("b.jpg", 960.0)], 0)
    # A comma inside a URL belongs to it; only trailing ones end it.
    assert srcset_parse("/c_scale,w_480/x.jpg 480w,/c_scale,w_960/x.jpg 960w") == (
        [("/c_scale,w_480/x.jpg", 480.0), ("/c_scale,w_960/x.jpg", 960.0)],
        0,
    )
    # Any ASCII whitespace separates a descriptor; a data: URL is one candidate, not six.
    assert srcset_parse("a.jpg\t1x,\nb.jpg\n2x") == ([("a.jpg", 1.0), ("b.jpg", 2.0)], 0)
    assert srcset_parse("data:image/gif;base64,R0lGOD,lhAQ 1w, c.jpg 600w")[0] == [
        ("data:image/gif;base64,R0lGOD,lhAQ", 1.0),
        ("c.jpg", 600.0),
    ]
    assert srcset_parse("a.jpg,b.jpg") == ([("a.jpg,b.jpg", 1.0)], 0)
    assert srcset_parse("a.jpg, b.jpg 2x") == ([("a.jpg", 1.0), ("b.jpg", 2.0)], 0)
    # Invalid descriptors drop their candidate; widths beat densities in a mixed set.
    assert srcset_parse("a.jpg 10q, b.jpg 0w, c.jpg 2x 3x, d.jpg 100w 50h") == ([("d.jpg", 100.0)], 3)
    assert srcset_parse("a.jpg 2x, b.jpg 300w") == ([("b.jpg", 300.0)], 1)
    assert srcset_parse("  ,, ") == ([], 0)


def test_one_broken_block_hides_none_of_the_pages_other_images():
    found = extract(
        b'<script type="application/ld+json">{"image": "/img/a.jpg",</script>'
        b'<script type="application/ld+json">' + b"[" * 100_000 + b"</script>"
        b"<style>.x{background:url(/img/b.jpg)}" + b"(" * 50_000 + b"</style>"
        b'<img src="/img/c.jpg"><div style="background-image:url(/img/d.jpg"></div>',
        base_url=f"{SITE}/p",
    )
    assert set(found.image_urls) >= {f"{SITE}/img/b.jpg", f"{SITE}/img/c.jpg", f"{SITE}/img/d.jpg"}
    assert found.problems[0].startswith("JSON-LD block 1: invalid JSON")
    assert any(p.startswith("JSON-LD block 2") for p in found.problems)


def test_a_linked_stylesheet_gives_its_backgrounds_against_its_own_url():
    found = stylesheet_images(
        "@font-face{src:url(/fonts/a.woff2)} .a{background:url(../img/sheet.jpg)} .b{cursor:url(/c.cur)}",
        url=f"{SITE}/static/css/site.css",
    )
    assert found.image_urls == [f"{SITE}/static/img/sheet.jpg"]
    assert found.images[0].found_in == "css stylesheet"


def test_links_are_followed_as_what_they_are():
    found = extract(
        b'<link rel="stylesheet" href="/s.css"><a href="/a.html">a</a><a href="/b.JPG">b</a><a href="/c.svg">c</a>'
        b'<a href="/d.pdf">d</a><a href="mailto:x@y">m</a>',
        base_url=f"{SITE}/",
    )
    assert found.links == [f"{SITE}/a.html", f"{SITE}/d.pdf"]
    assert found.image_urls == [f"{SITE}/b.JPG"]
    assert found.stylesheets == [f"{SITE}/s.css"]
    assert found.ignored == {"link to an image the analysis cannot read": 1, "mailto:": 1}


URL_PARTS = st.text(alphabet="aAzZ09-._~%2eE3a/?&=#:@!$'()*+,;", max_size=30)


@given(host=st.sampled_from(["Example.COM", "example.com", "h.example:80", "h.example:8080", "[::1]"]), rest=URL_PARTS)
def test_the_url_normaliser_is_idempotent_and_keeps_the_request(host, rest):
    from urllib.parse import unquote, urlsplit

    url = f"HTTP://{host}/{rest}"
    try:
        once = url_normal(url)
    except ValueError:
        return  # not a URL: the extractor counts it unparsable
    assert url_normal(once) == once
    before, after = urlsplit(url), urlsplit(once)
    assert after.hostname == before.hostname and (after.port or 80) == (before.port or 80)
    # The server receives the same resource: the same decoded query, the same path once dot segments
    # are resolved (the client removes them before sending, as browsers do).
    assert unquote(after.query) == unquote(before.query)
    assert unquote(after.path) == unquote(urlsplit(url_canonical(url)).path or "/")  # the path the client sends
    assert "#" not in once


@given(
    st.lists(
        st.sampled_from(["<img srcset='", "a.jpg 1x", ", ", "\t", "2x", "'>", "<style>", "url(", ")"])
        | st.text(max_size=40),
        max_size=30,
    )
)
def test_the_extractor_never_raises_and_bounds_what_it_returns(parts):
    found = extract(
        "".join(parts if isinstance(parts, list) else [parts]).encode("utf-8", "replace"), base_url=f"{SITE}/"
    )
    assert all(len(image.variants) <= 10 for image in found.images)
    assert len(found.problems) <= 10


def test_a_sources_rules_drop_tracking_and_size_parameters_and_only_those():
    from workers.pipeline.crawl import without_params
    from workers.pipeline.http import url_without_params

    found = extract(
        b'<img src="/a.jpg?w=300&id=5&utm_source=x"><img srcset="/a.jpg?w=600&id=5 600w, /b.jpg?w=9 9w">'
        b'<a href="/p.html?utm_campaign=y&page=2">p</a><a href="/p.html?page=2">again</a>',
        base_url=f"{SITE}/",
    )
    kept = without_params(found, ("utm_*", "w"))
    assert kept.image_urls == [f"{SITE}/a.jpg?id=5"]
    assert kept.images[0].variants == [f"{SITE}/b.jpg"]
    assert kept.links == [f"{SITE}/p.html?page=2"]
    assert url_without_params(f"{SITE}/a.jpg?width=3&w=1", ("w",)) == f"{SITE}/a.jpg?width=3"
    assert without_params(found, ()).image_urls == found.image_urls
