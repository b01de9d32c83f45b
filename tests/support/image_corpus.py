"""A corpus of pages that show one image each the way popular CMSs, shops, share tags and lazy-loading
libraries write it (issue 53): ``PATTERNS`` maps a page's path to its markup, the image the page shows
and where the crawl must say it found it. Every page also carries what must never be recorded (a
``data:`` placeholder, a ``javascript:`` link). Served by the tests' local server; read by
``extract`` and crawled by the real pool."""

from __future__ import annotations

from dataclasses import dataclass

GIF_PLACEHOLDER = "data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"
SVG_PLACEHOLDER = (
    "data:image/svg+xml,%3Csvg%20xmlns='http://www.w3.org/2000/svg'%20viewBox='0%200%20800%20600'%3E%3C/svg%3E"
)


@dataclass(frozen=True)
class Pattern:
    markup: str  # inside <body> (or <head> where the pattern lives there: head=True)
    image: str  # the path of the image the page shows (the candidate: its largest size)
    found_in: str  # where the crawl says it found it
    head: bool = False
    variants: tuple[str, ...] = ()  # the same image's other sizes, recorded with it


def _img(name: str) -> str:
    return f"/img/{name}.jpg"


PATTERNS: dict[str, Pattern] = {
    "plain-src": Pattern('<img src="/img/plain.jpg" alt="">', _img("plain"), "img src"),
    "srcset-w": Pattern(
        '<img src="/img/w-480.jpg" srcset="/img/w-480.jpg 480w, /img/w-1200.jpg 1200w, /img/w-800.jpg 800w" '
        'sizes="(max-width: 600px) 480px, 800px">',
        _img("w-1200"),
        "img srcset",
        variants=("/img/w-480.jpg", "/img/w-800.jpg"),
    ),
    "srcset-x": Pattern(
        '<img src="/img/x-1.jpg" srcset="/img/x-1.jpg 1x, /img/x-2.jpg 2x">', _img("x-2"), "img srcset"
    ),
    "picture": Pattern(
        '<picture><source type="image/avif" srcset="/img/pic.avif"><source type="image/webp" '
        'srcset="/img/pic-800.webp 800w, /img/pic-1600.webp 1600w"><img src="/img/pic.jpg"></picture>',
        "/img/pic-1600.webp",
        "source srcset",
    ),
    "loading-lazy": Pattern(
        '<img loading="lazy" decoding="async" src="/img/native-lazy.jpg">', _img("native-lazy"), "img src"
    ),
    "noscript": Pattern(
        f'<img class="lazyload" src="{GIF_PLACEHOLDER}"><noscript><img src="/img/noscript.jpg"></noscript>',
        _img("noscript"),
        "img src",
    ),
    "lazysizes-data-src": Pattern(
        f'<img data-src="/img/lazysizes.jpg" class="lazyload" src="{GIF_PLACEHOLDER}" alt="">',
        _img("lazysizes"),
        "img data-src",
    ),
    "lazysizes-data-srcset": Pattern(
        f'<img data-sizes="auto" data-srcset="/img/ls-300.jpg 300w,\n /img/ls-900.jpg 900w" '
        f'data-src="/img/ls-300.jpg" class="lazyload" src="{GIF_PLACEHOLDER}">',
        _img("ls-900"),
        "img data-srcset",
    ),
    "wp-rocket": Pattern(
        f'<img width="800" height="600" src="{SVG_PLACEHOLDER}" data-lazy-srcset="/img/rocket-800.jpg 800w, '
        '/img/rocket-1600.jpg 1600w" data-lazy-sizes="(max-width: 800px) 100vw, 800px" '
        'data-lazy-src="/img/rocket-800.jpg"><noscript><img src="/img/rocket-800.jpg"></noscript>',
        _img("rocket-1600"),
        "img data-lazy-srcset",
    ),
    "jquery-lazyload": Pattern(
        f'<img class="lazy" data-original="/img/jquery.jpg" src="{GIF_PLACEHOLDER}" width="640">',
        _img("jquery"),
        "img data-original",
    ),
    "lozad-img": Pattern('<img class="lozad" data-src="/img/lozad.jpg">', _img("lozad"), "img data-src"),
    "lozad-background": Pattern(
        '<div class="lozad" data-background-image="/img/lozad-bg.jpg"></div>',
        _img("lozad-bg"),
        "div data-background-image",
    ),
    "slick": Pattern('<div class="slide"><img data-lazy="/img/slick.jpg"></div>', _img("slick"), "img data-lazy"),
    "data-bg": Pattern(
        '<section class="hero lazyload" data-bg="/img/hero.jpg"></section>', _img("hero"), "section data-bg"
    ),
    "og-image": Pattern('<meta property="og:image" content="/img/og.jpg">', _img("og"), "meta og:image", head=True),
    "og-image-secure": Pattern(
        '<meta property="og:image:secure_url" content="/img/og-secure.jpg">',
        _img("og-secure"),
        "meta og:image:secure_url",
        head=True,
    ),
    "og-image-url": Pattern(
        '<meta property="og:image:url" content="/img/og-url.jpg">', _img("og-url"), "meta og:image:url", head=True
    ),
    "twitter-image": Pattern(
        '<meta name="twitter:image" content="/img/twitter.jpg">', _img("twitter"), "meta twitter:image", head=True
    ),
    "image-src": Pattern(
        '<link rel="image_src" href="/img/image-src.jpg">', _img("image-src"), "link rel=image_src", head=True
    ),
    "preload": Pattern(
        '<link rel="preload" as="image" href="/img/pre-640.jpg" '
        'imagesrcset="/img/pre-640.jpg 640w, /img/pre-1280.jpg 1280w" imagesizes="100vw">',
        _img("pre-1280"),
        "link rel=preload imagesrcset",
        head=True,
    ),
    "json-ld-product": Pattern(
        '<script type="application/ld+json">{"@context":"https://schema.org","@type":"Product","name":"Mug",'
        '"image":"/img/product.jpg","offers":{"@type":"Offer","price":"9.90"}}</script>',
        _img("product"),
        "json-ld",
        head=True,
    ),
    "json-ld-list": Pattern(
        '<script type="application/ld+json">{"@type":"Recipe","image":["/img/recipe-1x1.jpg"]}</script>',
        _img("recipe-1x1"),
        "json-ld",
        head=True,
    ),
    "json-ld-imageobject": Pattern(
        '<script type="application/ld+json">{"@type":"NewsArticle","image":{"@type":"ImageObject",'
        '"contentUrl":"/img/news.jpg","width":1200}}</script>',
        _img("news"),
        "json-ld",
        head=True,
    ),
    "json-ld-yoast-graph": Pattern(
        '<script type="application/ld+json" class="yoast-schema-graph">{"@context":"https://schema.org","@graph":'
        '[{"@type":"WebPage","@id":"/yoast/#webpage","primaryImageOfPage":{"@id":"/yoast/#primaryimage"},'
        '"image":{"@id":"/yoast/#primaryimage"},"thumbnailUrl":"/img/yoast.jpg"},{"@type":"ImageObject",'
        '"@id":"/yoast/#primaryimage","url":"/img/yoast.jpg","contentUrl":"/img/yoast.jpg","width":1024}]}</script>',
        _img("yoast"),
        "json-ld",
        head=True,
    ),
    "json-ld-video-thumbnail": Pattern(
        '<script type="application/ld+json">{"@type":"VideoObject","name":"Clip","contentUrl":"/media/clip.mp4",'
        '"thumbnailUrl":["/img/video-thumb.jpg"]}</script>',
        _img("video-thumb"),
        "json-ld",
        head=True,
    ),
    "microdata-img": Pattern(
        '<div itemscope itemtype="https://schema.org/Product"><img itemprop="image" src="/img/micro.jpg"></div>',
        _img("micro"),
        "img src (itemprop=image)",
    ),
    "microdata-meta": Pattern(
        '<div itemscope itemtype="https://schema.org/Product"><meta itemprop="image" content="/img/micro-meta.jpg">'
        "</div>",
        _img("micro-meta"),
        "microdata meta itemprop=image",
    ),
    "microdata-link": Pattern(
        '<div itemscope itemtype="https://schema.org/Offer"><link itemprop="image" href="/img/micro-link.jpg"></div>',
        _img("micro-link"),
        "microdata link itemprop=image",
    ),
    "css-inline-quoted": Pattern(
        "<div style=\"background-image: url('/img/inline.jpg'); height: 300px\"></div>",
        _img("inline"),
        "css style attribute",
    ),
    "css-inline-shorthand": Pattern(
        '<div style="background:#000 url(/img/shorthand.jpg) no-repeat center / cover"></div>',
        _img("shorthand"),
        "css style attribute",
    ),
    "css-style-block": Pattern(
        '<style>.banner{color:red}\n.banner{background-image:url("/img/style-block.jpg")}</style><div class="banner">',
        _img("style-block"),
        "css <style>",
    ),
    "css-media": Pattern(
        "<style>@media (min-width: 800px) { .hero { background: url(/img/media.jpg) } }</style>",
        _img("media"),
        "css <style>",
    ),
    "css-image-set": Pattern(
        '<style>.logo{background-image:image-set("/img/set.jpg" 1x, "/img/set-2x.jpg" 2x)}</style>',
        _img("set"),
        "css <style>",
    ),
    "css-webkit-image-set": Pattern(
        "<div style=\"background-image:-webkit-image-set(url('/img/wset.jpg') 1x)\"></div>",
        _img("wset"),
        "css style attribute",
    ),
    "amp-img": Pattern(
        '<amp-img src="/img/amp.jpg" width="800" height="600" layout="responsive"></amp-img>',
        _img("amp"),
        "amp-img src",
    ),
    "video-poster": Pattern(
        '<video controls poster="/img/poster.jpg"><source src="/media/clip.mp4" type="video/mp4"></video>',
        _img("poster"),
        "video poster",
    ),
    "svg-href": Pattern(
        '<svg viewBox="0 0 10 10"><image href="/img/svg-href.jpg" width="10" height="10"/></svg>',
        _img("svg-href"),
        "svg image",
    ),
    "svg-xlink": Pattern(
        '<svg xmlns:xlink="http://www.w3.org/1999/xlink"><image xlink:href="/img/svg-xlink.jpg"/></svg>',
        _img("svg-xlink"),
        "svg image",
    ),
    "srcset-cloudinary-comma": Pattern(
        '<img srcset="/img/c_scale,w_480/cloud.jpg 480w, /img/c_scale,w_960/cloud.jpg 960w">',
        "/img/c_scale,w_960/cloud.jpg",
        "img srcset",
        variants=("/img/c_scale,w_480/cloud.jpg",),
    ),
    "srcset-tab-newline": Pattern(
        '<img srcset="/img/tab-480.jpg\t480w,\n/img/tab-960.jpg\n960w">', _img("tab-960"), "img srcset"
    ),
    "srcset-data-placeholder": Pattern(
        f'<img srcset="{GIF_PLACEHOLDER} 1w, /img/after-data.jpg 600w">', _img("after-data"), "img srcset"
    ),
    "base-href": Pattern('<base href="/img/deep/"><img src="based.jpg">', "/img/deep/based.jpg", "img src", head=False),
    "image-link": Pattern(
        '<a href="/img/gallery-full.jpg" download>Full size</a>', _img("gallery-full"), "a href (an image file)"
    ),
    "url-spelling": Pattern('<img src="/IMG/../img/%7Espelled.jpg#zoom">', "/img/~spelled.jpg", "img src"),
}

# Every page also carries these: none of them may become a candidate.
NEVER_RECORDED = '<a href="javascript:void(0)">x</a><img src="" alt=""><img src="about:blank">'


def page(name: str) -> bytes:
    pattern = PATTERNS[name]
    head = pattern.markup if pattern.head else ""
    body = "" if pattern.head else pattern.markup
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{name}</title>{head}</head>"
        f"<body><h1>{name}</h1>{body}{NEVER_RECORDED}</body></html>"
    ).encode()
