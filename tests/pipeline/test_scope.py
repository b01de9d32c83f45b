"""A source's scope matches by origin and whole path segments (issue 17, finding 13)."""

import pytest

from jobs.services import JobInputError
from workers.pipeline.models import url_in_scope
from workers.pipeline.services import source_validate


@pytest.mark.parametrize(
    "url,scope,inside",
    [
        ("https://site.example/shop", "https://site.example/shop", True),
        ("https://site.example/shop/a.html", "https://site.example/shop", True),
        ("https://site.example/shop/a.html", "https://site.example/shop/", True),
        ("https://site.example/shopping", "https://site.example/shop", False),
        ("https://site.example.evil.com/", "https://site.example", False),
        ("https://site.example.evil.com/x", "https://site.example/", False),
        ("https://SITE.example/a", "https://site.example/", True),
        ("http://site.example/a", "https://site.example/", False),
        ("https://site.example:8443/a", "https://site.example/", False),
        ("https://user@site.example/a", "https://site.example/", False),
        ("https://site.example:99999/a", "https://site.example/", False),
    ],
)
def test_scope_by_origin_and_whole_segments(url, scope, inside):
    assert url_in_scope(url, scope) is inside


def test_a_scope_must_contain_its_base_url():
    source_validate(name="Shop", base_url="https://site.example/shop/", scope="https://site.example/shop")
    with pytest.raises(JobInputError, match="scope"):
        source_validate(name="Evil", base_url="https://site.example.evil.com/", scope="https://site.example")
