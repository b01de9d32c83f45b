"""RFC 9309 robots.txt decisions, clause by clause, from the RFC's own text and examples.

Each expected outcome follows from the clause named in its test; where an example comes from somewhere
else (Google's robots.txt documentation), the test says so and the outcome still follows from the RFC.
"""

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from workers.pipeline.robotstxt import MAX_BYTES, RobotsRules, Status, decision_for_status, within_limit

BOT = "LeitstandBot"


def allowed(robots: bytes | str, path: str, token: str = BOT) -> bool:
    return RobotsRules.parse(robots).is_allowed(path, token)


# §2.2: syntax.


def test_keys_and_the_product_token_are_case_insensitive():
    robots = "USER-AGENT: leitstandbot\nDISALLOW: /private\n"
    assert not allowed(robots, "/private/a")
    assert not allowed(robots, "/private/a", "LEITSTANDBOT")
    assert allowed(robots, "/public")


@pytest.mark.parametrize("line_end", ["\r\n", "\r", "\n"])
def test_every_line_end_of_the_grammar_is_read(line_end):
    robots = line_end.join(["User-agent: *", "Disallow: /a", "Disallow: /b", ""])
    assert not allowed(robots, "/a") and not allowed(robots, "/b")
    assert allowed(robots, "/c")


def test_whitespace_around_keys_and_values_and_comments_are_ignored():
    robots = "# a comment on its own line\n \tUser-agent \t: \tLeitstandBot # in line\n\t Disallow :\t/a # too\n"
    assert not allowed(robots, "/a")
    assert allowed(robots, "/b")


def test_a_byte_order_mark_does_not_hide_the_first_group():
    assert not allowed(b"\xef\xbb\xbfUser-agent: LeitstandBot\nDisallow: /\n", "/page")
    assert not allowed("\ufeffUser-agent: LeitstandBot\nDisallow: /\n", "/page")


# §2.2.1: the user-agent line.


def test_the_product_token_is_matched_against_the_lines_token_not_as_a_substring():
    # Figure 1 shows the token "ExampleBot" of "Mozilla/5.0 (compatible; ExampleBot/0.1; ...)".
    robots = "User-agent: ExampleBot/0.1\nDisallow: /\n"
    assert not allowed(robots, "/page", "ExampleBot")
    assert allowed(robots, "/page", "Example")
    assert allowed(robots, "/page", "ExampleBotNext")


def test_groups_for_the_same_product_token_are_merged():
    # Figure 2.
    robots = "user-agent: ExampleBot\ndisallow: /foo\ndisallow: /bar\n\nuser-agent: ExampleBot\ndisallow: /baz\n"
    for path in ("/foo", "/bar", "/baz"):
        assert not allowed(robots, path, "ExampleBot")
    assert allowed(robots, "/qux", "ExampleBot")


def test_without_a_matching_group_the_star_group_applies():
    # Figure 3.
    robots = "user-agent: *\ndisallow: /foo\ndisallow: /bar\n\nuser-agent: BazBot\ndisallow: /baz\n"
    assert not allowed(robots, "/foo", "ExampleBot")
    assert not allowed(robots, "/bar", "ExampleBot")
    assert allowed(robots, "/baz", "ExampleBot")


def test_star_groups_are_merged_too():
    robots = "User-agent: *\nDisallow: /a\n\nUser-agent: OtherBot\nDisallow: /\n\nUser-agent: *\nDisallow: /b\n"
    assert not allowed(robots, "/a") and not allowed(robots, "/b")
    assert allowed(robots, "/c")


@pytest.mark.parametrize("robots", ["", "# nothing but a comment\n", "User-agent: OtherBot\nDisallow: /\n"])
def test_without_a_matching_or_star_group_no_rules_apply(robots):
    assert allowed(robots, "/anything")


def test_consecutive_user_agent_lines_open_one_group():
    robots = "User-agent: OtherBot\nUser-agent: LeitstandBot\nDisallow: /shared\n"
    assert not allowed(robots, "/shared", "OtherBot")
    assert not allowed(robots, "/shared")


def test_a_user_agent_line_after_rules_opens_a_new_group():
    robots = "User-agent: OtherBot\nDisallow: /other\nUser-agent: LeitstandBot\nDisallow: /mine\n"
    assert allowed(robots, "/other")
    assert allowed(robots, "/mine", "OtherBot")


def test_a_star_with_more_to_it_names_no_crawler():
    assert allowed("User-agent: *bot\nDisallow: /\n", "/page")


# §2.2.2: the allow and disallow lines.


@pytest.mark.parametrize(
    "rules,path,is_allowed",
    [
        # §5.2, "Longest Match". The RFC's sentence names the URI ".../disallow.gif", which the disallow
        # rule could not match; the longer rule it says MUST be used is the one for disallowed.gif.
        ("Allow: /example/page/\nDisallow: /example/page/disallowed.gif", "/example/page/disallowed.gif", False),
        ("Allow: /example/page/\nDisallow: /example/page/disallowed.gif", "/example/page/", True),
        ("Allow: /example/page/\nDisallow: /example/page/disallowed.gif", "/example/page/other.gif", True),
        ("Allow: /p\nDisallow: /", "/page", True),
        ("Allow: /page\nDisallow: /*.htm", "/page.htm", False),  # 6 octets beat 5
        ("Allow: /$\nDisallow: /", "/", True),
        ("Allow: /$\nDisallow: /", "/page.htm", False),
    ],
)
def test_the_match_with_the_most_octets_wins(rules, path, is_allowed):
    assert allowed(f"User-agent: *\n{rules}\n", path) is is_allowed


@pytest.mark.parametrize("rules", ["Allow: /folder\nDisallow: /folder", "Disallow: /folder\nAllow: /folder"])
def test_allow_wins_a_tie_whatever_the_order(rules):
    assert allowed(f"User-agent: *\n{rules}\n", "/folder/page")


def test_matching_is_case_sensitive_and_starts_at_the_first_octet():
    robots = "User-agent: *\nDisallow: /fish\n"
    assert allowed(robots, "/Fish") and allowed(robots, "/catfish")
    assert not allowed(robots, "/fish")


def test_an_empty_disallow_matches_nothing():
    assert allowed("User-agent: *\nDisallow:\n", "/anything")
    assert allowed("User-agent: *\nDisallow: \t# nothing\nDisallow: /a\n", "/b")


def test_rules_before_the_first_user_agent_line_are_ignored():
    assert allowed("Disallow: /\nUser-agent: *\nDisallow: /other\n", "/page")


def test_robots_txt_is_implicitly_allowed():
    assert allowed("User-agent: *\nDisallow: /\n", "/robots.txt")
    assert not allowed("User-agent: *\nDisallow: /\n", "/robots.txt.bak")


def test_an_empty_path_is_the_root():
    assert not allowed("User-agent: *\nDisallow: /$\n", "")


def test_a_rule_without_a_leading_slash_is_read_as_starting_at_the_root():
    robots = "User-agent: *\nDisallow: private\n"
    assert not allowed(robots, "/private/a")
    assert allowed(robots, "/public/private")


@pytest.mark.parametrize(
    "rule,path",
    [
        # Figure 4, each row's "Path" as the rule against its "Path to Match" as the URL.
        ("/foo/bar?baz=quz", "/foo/bar?baz=quz"),
        ("/foo/bar?baz=https://foo.bar", "/foo/bar?baz=https%3A%2F%2Ffoo.bar"),
        ("/foo/bar/ツ", "/foo/bar/%E3%83%84"),
        ("/foo/bar/%E3%83%84", "/foo/bar/%E3%83%84"),
        ("/foo/bar/%62%61%7A", "/foo/bar/baz"),
        # The same normalisation applies to the URL's side.
        ("/foo/bar/%E3%83%84", "/foo/bar/ツ"),
        ("/foo/bar/%e3%83%84", "/foo/bar/%E3%83%84"),
        ("/foo/bar/baz", "/foo/bar/%62%61%7a"),
    ],
)
def test_paths_are_compared_after_percent_encoding_normalisation(rule, path):
    robots = f"User-agent: *\nDisallow: {rule}\n"
    assert not allowed(robots, path)
    assert allowed(robots, "/foo/other")


def test_an_encoded_reserved_character_stays_distinct_in_the_path():
    assert allowed("User-agent: *\nDisallow: /a/b\n", "/a%2Fb")


# §2.2.3: special characters.


def test_the_rfc_special_characters_examples():
    # Figure 5: "#", "$" and "*".
    anchored = "User-agent: *\nDisallow: /\nallow: /this/path/exactly$ # comment in line\n"
    assert allowed(anchored, "/this/path/exactly")
    assert not allowed(anchored, "/this/path/exactly.html")
    wildcard = "# comment on its own line\nUser-agent: *\nDisallow: /\nallow: /this/*/exactly\n"
    assert allowed(wildcard, "/this/is/really/exactly")
    assert not allowed(wildcard, "/this/exactly")
    assert not allowed(wildcard, "/that/path/exactly")


@pytest.mark.parametrize(
    "rule,uri,other",
    [
        # Figure 6: a percent-encoded "*" or "$" in a rule is that character in the URI, not special.
        ("/path/file-with-a-%2A.html", "/path/file-with-a-*.html", "/path/file-with-a-x.html"),
        ("/path/foo-%24", "/path/foo-$", "/path/foo-"),
    ],
)
def test_percent_encoded_special_characters_match_verbatim(rule, uri, other):
    robots = f"User-agent: *\nDisallow: {rule}\n"
    assert not allowed(robots, uri)
    assert allowed(robots, other)


# Google's robots.txt documentation tabulates these patterns; each outcome follows from §2.2.2
# (prefix match from the first octet, case-sensitive) and §2.2.3 ("*" any sequence, "$" the end).
PATTERN_EXAMPLES = {
    "/fish": (
        ["/fish", "/fish.html", "/fish/salmon.html", "/fishheads", "/fishheads/yummy.html", "/fish.php?id=anything"],
        ["/Fish.asp", "/catfish", "/?id=fish", "/desert/fish"],
    ),
    "/fish*": (
        ["/fish", "/fish.html", "/fish/salmon.html", "/fishheads", "/fishheads/yummy.html", "/fish.php?id=anything"],
        ["/Fish.asp", "/catfish", "/?id=fish", "/desert/fish"],
    ),
    "/fish/": (
        ["/fish/", "/fish/?id=anything", "/fish/salmon.htm"],
        ["/fish", "/fish.html", "/animals/fish/", "/Fish/Salmon.asp"],
    ),
    "/*.php": (
        [
            "/index.php",
            "/filename.php",
            "/folder/filename.php",
            "/folder/filename.php?parameters",
            "/folder/any.php.file.html",
            "/filename.php/",
        ],
        ["/", "/windows.PHP"],
    ),
    "/*.php$": (
        ["/filename.php", "/folder/filename.php"],
        ["/filename.php?parameters", "/filename.php/", "/filename.php5", "/windows.PHP"],
    ),
    "/fish*.php": (["/fish.php", "/fishheads/catfish.php?parameters"], ["/Fish.PHP"]),
    "/": (["/", "/anything", "/a?b"], []),
    "/*": (["/", "/anything", "/a?b"], []),
    "/$": (["/"], ["/anything", "/?a"]),
}


@pytest.mark.parametrize(
    "pattern,path,is_match",
    [
        (pattern, path, is_match)
        for pattern, (matches, misses) in PATTERN_EXAMPLES.items()
        for paths, is_match in ((matches, True), (misses, False))
        for path in paths
    ],
)
def test_pattern_examples(pattern, path, is_match):
    assert allowed(f"User-agent: *\nDisallow: {pattern}\n", path) is not is_match


# §2.2.4 and §2.3.1.5: other records, and lines that cannot be parsed.


@pytest.mark.parametrize("record", ["X-Foo: y", "Invalid-Unknown-Line: x", "Sitemap: https://example.org/s.xml"])
def test_other_records_do_not_end_a_group(record):
    assert not allowed(f"User-agent: LeitstandBot\n{record}\nDisallow: /\n", "/")


def test_other_records_do_not_split_consecutive_user_agent_lines():
    robots = "User-agent: OtherBot\nX-Foo: y\nSitemap: /s.xml\nUser-agent: LeitstandBot\nDisallow: /\n"
    assert not allowed(robots, "/", "OtherBot")


def test_crawl_delay_is_a_group_member_and_ends_the_user_agent_lines():
    robots = "User-agent: *\nCrawl-delay: 5\n\nUser-agent: LeitstandBot\nDisallow: /\n"
    assert allowed(robots, "/", "OtherBot")
    assert not allowed(robots, "/")


def test_unparseable_lines_are_skipped_and_the_rest_is_used():
    robots = "User-agent: *\n\x00\x01garbage\x7f\nDisallow /no-colon\n:::\nDisallow: /a\x00\n\xff\nDisallow: /b\n"
    assert not allowed(robots, "/b")
    assert not allowed(robots, "/a%00")
    assert allowed(robots, "/no-colon")


# §5.1: the simple example, for a crawler without a group of its own and for each one named there.

SIMPLE_EXAMPLE = """User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""


@pytest.mark.parametrize(
    "token,path,is_allowed",
    [
        ("ExampleBot", "/publications/", True),
        ("ExampleBot", "/example/", False),
        ("ExampleBot", "/example/page.html", False),
        ("ExampleBot", "/images/logo.gif", False),  # "*" matches any character, "/" included
        ("ExampleBot", "/images/logo.gif?size=2", True),  # "$" anchors the end
        ("ExampleBot", "/index.html", True),
        ("FooBot", "/example/page.html", True),
        ("FooBot", "/example/allowed.gif", True),  # the longer allow beats "*.gif$": the "*" group is not foobot's
        ("FooBot", "/example/other.html", False),
        ("FooBot", "/publications/", False),
        ("FooBot", "/", False),
        ("FooBot", "/robots.txt", True),
        ("BarBot", "/example/page.html", False),
        ("BazBot", "/example/page.html", False),
        ("BarBot", "/example/other.html", True),
        ("BazBot", "/images/logo.gif", True),
        ("QuxBot", "/example/page.html", True),  # an empty group at the end: unrestricted
        ("QuxBot", "/images/logo.gif", True),
    ],
)
def test_the_rfc_simple_example(token, path, is_allowed):
    assert allowed(SIMPLE_EXAMPLE, path, token) is is_allowed


# §2.5: the parsing limit.


def test_a_rule_after_the_first_500_kib_is_ignored():
    head = b"User-agent: *\nDisallow: /early\n"
    padding = b"#" * (MAX_BYTES - len(head) - 1) + b"\n"
    assert len(head + padding) == MAX_BYTES
    rules = RobotsRules.parse(head + padding + b"Disallow: /late\n")
    assert not rules.is_allowed("/early", BOT)
    assert rules.is_allowed("/late", BOT)


def test_a_rule_that_ends_at_the_limit_is_kept():
    head = b"User-agent: *\n"
    rule = b"Disallow: /last"
    padding = b"#" * (MAX_BYTES - len(head) - len(rule) - 1) + b"\n"
    assert len(head + padding + rule) == MAX_BYTES
    assert not allowed(head + padding + rule + b"\nDisallow: /late\n", "/last")


def test_a_cut_allow_is_dropped_and_a_cut_disallow_kept_as_the_cautious_reading():
    head = b"User-agent: *\nDisallow: /\n"
    padding = b"#" * (MAX_BYTES - len(head) - len(b"Allow: /pub") - 1) + b"\n"
    cut_allow = head + padding + b"Allow: /public/a\n"
    assert within_limit(cut_allow).endswith(padding) and not allowed(cut_allow, "/pub")
    head = b"User-agent: *\n"
    padding = b"#" * (MAX_BYTES - len(head) - len(b"Disallow: /p") - 1) + b"\n"
    cut_disallow = head + padding + b"Disallow: /private-area\n"
    assert within_limit(cut_disallow).endswith(b"Disallow: /p")
    assert not allowed(cut_disallow, "/public"), "the prefix disallows more, never less"


def test_text_is_not_cut_again_where_replacement_characters_made_it_longer():
    """robots.py limits the bytes, then decodes with replacement characters: 200 KB of Latin-1 bytes
    become 600 KB of UTF-8 when encoded again, and the rule at the end must stay."""
    latin1 = b"User-agent: *\n" + b"# \xe9\xe8\xe0\n" * 50_000 + b"Disallow: /private\n"
    text = within_limit(latin1).decode("utf-8", errors="replace")
    assert len(text.encode()) > MAX_BYTES
    assert not allowed(text, "/private")


# Crawl-delay: not in the RFC; read per group like a rule.


@pytest.mark.parametrize(
    "value,delay",
    [
        ("10", 10.0),
        ("2.5", 2.5),
        (".5", 0.5),
        ("0", 0.0),
        ("999999999", 999999999.0),
        ("1e300", 1e300),
        ("1e400", None),  # overflows to infinity
        ("inf", None),
        ("nan", None),
        ("-1", None),
        ("abc", None),
        ("1_0", None),
        ("", None),
    ],
)
def test_crawl_delay_is_a_finite_non_negative_decimal(value, delay):
    assert RobotsRules.parse(f"User-agent: *\nCrawl-delay: {value}\n").crawl_delay(BOT) == delay


def test_crawl_delay_comes_from_the_group_that_applies():
    robots = "User-agent: *\nCrawl-delay: 1\n\nUser-agent: LeitstandBot\nCrawl-delay: 7\nDisallow: /x\n"
    rules = RobotsRules.parse(robots)
    assert rules.crawl_delay(BOT) == 7.0
    assert rules.crawl_delay("OtherBot") == 1.0
    assert RobotsRules.parse("User-agent: OtherBot\nCrawl-delay: 3\n").crawl_delay(BOT) is None


def test_merged_groups_give_their_largest_valid_crawl_delay():
    robots = "User-agent: LeitstandBot\nCrawl-delay: 2\n\nUser-agent: LeitstandBot\nCrawl-delay: 5\nCrawl-delay: x\n"
    assert RobotsRules.parse(robots).crawl_delay(BOT) == 5.0


# §2.3.1: access results.


@pytest.mark.parametrize(
    "status,decision",
    [
        (200, "rules"),  # §2.3.1.1
        (204, "rules"),
        (301, "allow_all"),  # §2.3.1.2: more redirects than the fetcher followed
        (404, "allow_all"),  # §2.3.1.3
        (403, "allow_all"),
        (429, "disallow_all_retry"),  # a request to slow down, not a missing file
        (500, "disallow_all_retry"),  # §2.3.1.4
        (503, "disallow_all_retry"),
        (None, "disallow_all_retry"),
        (100, "disallow_all_retry"),
        (600, "disallow_all_retry"),
    ],
)
def test_decision_for_status(status, decision):
    assert decision_for_status(status) == decision
    assert Status(status).decision == decision


# Robustness: parse, is_allowed and crawl_delay never raise, whatever arrives.

RECORDS = st.lists(
    st.tuples(
        st.sampled_from(["User-agent", "user-agent", "Allow", "Disallow", "Crawl-delay", "Sitemap", "X-Foo", ""]),
        st.text(),
        st.sampled_from(["\n", "\r\n", "\r", "", "#"]),
    )
).map(lambda records: "".join(f"{key}:{value}{end}" for key, value, end in records))


@given(content=st.binary() | st.text() | RECORDS, path=st.text(), token=st.text())
def test_nothing_raises_and_the_types_are_right(content, path, token):
    rules = RobotsRules.parse(content)
    assert isinstance(rules.is_allowed(path, token), bool)
    delay = rules.crawl_delay(token)
    assert delay is None or (isinstance(delay, float) and math.isfinite(delay) and delay >= 0)


@given(path=st.text(alphabet=st.characters(exclude_characters="#*$\r\n", exclude_categories=["Zs", "Cc", "Cs"])))
def test_a_disallowed_path_is_disallowed_however_it_is_written(path):
    rule = "/" + path.strip()
    assume(rule.partition("?")[0] != "/robots.txt")  # always allowed, §2.2.2
    assert not allowed(f"User-agent: *\nDisallow: {rule}\n", rule)


def test_a_disallow_cut_inside_a_character_keeps_the_whole_characters_before_it():
    head = b"User-agent: *\n"
    rule = "Disallow: /café/secret".encode()
    padding = b"#" * (MAX_BYTES - len(head) - len(b"Disallow: /caf") - 2) + b"\n"
    robots = head + padding + rule + b"\n"  # the limit falls between the two bytes of "é"
    assert within_limit(robots).endswith(b"Disallow: /caf")
    assert not allowed(robots, "/café/secret") and not allowed(robots, "/cafz")
