"""Safe image decoding and a Pillow-only perceptual hash, for the analysis handler.

Decoding treats every image as hostile: only JPEG, PNG, GIF and WEBP are opened (never EPS, which
Pillow would hand to Ghostscript), Pillow's decompression-bomb limit stays on and is enforced as an
error, and truncated or corrupt files are refused. Every refusal is a ``PermanentError``: the same
bytes will fail the same way on every retry.

The hash is a difference hash (dHash): the image is reduced to 9×8 grey pixels and each bit says
whether a pixel is brighter than its right neighbour. It survives resizing, recompression and small
colour changes, costs one resize, and needs no numpy/scipy (the ``imagehash`` package would pull in
~220 MB for a DCT hash of similar robustness at this scale). Similarity is 1 − Hamming distance / 64.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, UnidentifiedImageError

from jobs.errors import PermanentError
from workers.pipeline import options
from workers.runtime.pool import JobTimeout, time_limit

ALLOWED_FORMATS = ("JPEG", "PNG", "GIF", "WEBP")
# Pillow's WebP decoder holds about four full-size RGBA copies while it decodes (and cannot decode
# scaled): measured 15 MB a megapixel, 385 MB for 25 megapixels (a 45 KB file). Its own budget keeps
# a WebP's decoding near the other formats' worst case (~130 MB at 8 megapixels, above a worker's
# own): tests/pipeline/test_image_memory.py measures each format's.
WEBP_MAX_PIXELS = 8_000_000
HASH_BITS = 64


class ImageRefused(PermanentError):
    """The bytes are not an image we decode: wrong format, a decompression bomb, truncated, corrupt."""


class DecodeTimedOut(ImageRefused):
    """Decoding ran past ``DECODE_SECONDS``: the same bytes would again (a recheck reads it as no
    answer, never as "replaced")."""


# A 25-megapixel image decodes in about a second; a crafted one (scans, deflate tricks) is cut here,
# inside the job's own time limit (signals: only in a pool's worker, the main thread).
DECODE_SECONDS = 15.0


@dataclass(frozen=True)
class DecodedImage:
    format: str
    width: int
    height: int
    dhash: int
    thumbnail: bytes = b""  # a JPEG of at most THUMBNAIL_SIZE, re-encoded from the decoded pixels
    pixels: Image.Image | None = field(default=None, repr=False, compare=False)  # RGB, for the comparison


THUMBNAIL_SIZE = (320, 320)
THUMBNAIL_QUALITY = 85  # JPEG: a reviewer compares it by eye with the original beside it
# A JPEG is decoded at the smallest of its 1/2, 1/4, 1/8 scales that keeps this size: the hash and the
# thumbnail need no more, and a large photo costs an eighth to a sixty-fourth of the memory.
JPEG_DRAFT_SIZE = (1024, 1024)


def decode(data: bytes, *, max_pixels: int | None = None) -> DecodedImage:
    """Open, verify and decode ``data``; compute its dHash. An image over ``max_pixels``
    (``LEITSTAND_IMAGE_MAX_PIXELS``) is refused from its header, before a pixel is decoded."""
    max_pixels = max_pixels or options.current().image_max_pixels
    try:
        with warnings.catch_warnings():
            # Pillow warns between MAX_IMAGE_PIXELS and twice that; treat the warning as the error.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS) as probe:
                probe.verify()  # structure and checksums, without decoding the pixels
            with Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS) as image:
                width, height = image.size  # from the header
                if width * height > max_pixels:
                    raise ImageRefused(
                        f"{width}×{height} is {width * height / 1e6:.1f} megapixels; "
                        f"the limit is {max_pixels / 1e6:g} (LEITSTAND_IMAGE_MAX_PIXELS)"
                    )
                if image.format == "WEBP" and width * height > min(max_pixels, WEBP_MAX_PIXELS):
                    raise ImageRefused(
                        f"a WebP of {width}×{height} is {width * height / 1e6:.1f} megapixels; a WebP's limit is "
                        f"{min(max_pixels, WEBP_MAX_PIXELS) / 1e6:g} (its decoder holds several full-size copies)"
                    )
                if image.format == "JPEG":
                    scans = jpeg_scans(data)
                    if scans > MAX_JPEG_SCANS:
                        # Each scan of a progressive JPEG is a pass over every coefficient: 265,080 of
                        # them in 10 MiB took 250 CPU-seconds to decode.
                        raise ImageRefused(f"a JPEG of {scans} scans; the limit is {MAX_JPEG_SCANS}")
                    image.draft("RGB", JPEG_DRAFT_SIZE)
                try:
                    with time_limit(DECODE_SECONDS, within_outer=True) as limit:
                        image.load()  # decodes every pixel: truncated data fails here
                except JobTimeout:
                    if limit.clamped:
                        raise  # the job's own time ran out (a slow site before it): worth a retry
                    # The image's own budget: the same bytes would run out of time again.
                    raise DecodeTimedOut(f"decoding {width}×{height} pixels took over {DECODE_SECONDS:g} s") from None
                pixels = flattened(_reduced(image))
                return DecodedImage(
                    format=image.format,
                    width=width,
                    height=height,
                    dhash=dhash(pixels),
                    thumbnail=_thumbnail(pixels),
                    pixels=pixels,
                )
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageRefused(f"decompression bomb: {exc}") from None
    except UnidentifiedImageError:
        raise ImageRefused(f"not one of the accepted formats ({', '.join(ALLOWED_FORMATS)})") from None
    except (OSError, SyntaxError, ValueError) as exc:  # Pillow's errors for truncated and corrupt files
        raise ImageRefused(f"corrupt or truncated image: {exc}") from None


BACKGROUND = (255, 255, 255)
# Scans of one JPEG (a baseline JPEG has one, a progressive one about ten; libjpeg's own tools
# suggest a limit for untrusted files).
MAX_JPEG_SCANS = 100


def jpeg_scans(data: bytes) -> int:
    """How many scans (start-of-scan markers, FF DA) a JPEG has, counted before it is decoded. Inside
    the entropy-coded data an FF byte is always followed by 00 or a restart marker, so FF DA is a
    marker wherever it occurs."""
    return data.count(b"\xff\xda")


def _reduced(image: Image.Image) -> Image.Image:
    """The decoded image, flattened, with its longer side at most about twice what the comparison
    and the thumbnail use (``JPEG_DRAFT_SIZE``; a JPEG is decoded that small already), reduced by an
    integer factor and flattened a strip of rows at a time: flattening a 25-megapixel image with alpha
    made four full-size copies (~390 MB), and Pillow's own ``reduce`` of an RGBA image premultiplies a
    full-size copy first. The decoded image itself stays the largest copy."""
    factor = max(image.width, image.height) // (2 * JPEG_DRAFT_SIZE[0])
    if factor < 2:
        return image
    rows = factor * STRIP_ROWS
    reduced = Image.new("RGB", (-(-image.width // factor), -(-image.height // factor)))
    for top in range(0, image.height, rows):
        piece = image.crop((0, top, image.width, min(top + rows, image.height)))
        reduced.paste(flattened(_reduced_piece(piece, factor)), (0, top // factor))
    return reduced


STRIP_ROWS = 64  # reduced rows per strip: a few megabytes of the decoded image at a time


def _reduced_piece(piece: Image.Image, factor: int) -> Image.Image:
    if piece.mode in ("I;16", "I;16B", "I;16L", "I"):
        return _grey_8bit(piece, step=factor)  # every factor-th pixel: Pillow cannot reduce 16-bit grey
    if piece.mode not in ("L", "LA", "La", "RGB", "RGBA", "RGBa", "F"):
        piece = piece.convert("RGBA" if piece.mode in ("P", "PA") and _is_transparent(piece) else "RGB")
    return piece.reduce(factor)


def _is_transparent(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        image.mode in ("P", "L", "RGB") and "transparency" in image.info
    )


def _grey_8bit(image: Image.Image, *, step: int = 1) -> Image.Image:
    """16-bit grey scaled to 8 bits (Pillow's conversion would clip it to white), every ``step``-th
    pixel, without a 64-bit copy (one of a large 16-bit image cost ~450 MB)."""
    grey = np.asarray(image)[::step, ::step]
    if image.mode == "I":
        grey = grey.clip(0, 65535)
        if grey.max(initial=0) > 255:
            grey = grey >> 8
        return Image.fromarray(grey.astype(np.uint8), "L")
    return Image.fromarray((grey.astype(np.uint16, copy=False) >> 8).astype(np.uint8), "L")


def flattened(image: Image.Image) -> Image.Image:
    """The pixels as a person sees them, in 8-bit RGB: transparency composited onto white (a
    transparent logo reposted on a white page is the same picture; an invisible image is blank, not
    the colours hidden under its alpha), 16-bit grey scaled to 8 bits (Pillow's conversion would
    clip it to white)."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        image = _grey_8bit(image)
    if not _is_transparent(image):
        return image if image.mode == "RGB" else image.convert("RGB")
    ground = Image.new("RGBA", image.size, (*BACKGROUND, 255))
    return Image.alpha_composite(ground, image.convert("RGBA")).convert("RGB")


def _thumbnail(image: Image.Image) -> bytes:
    """Only pixels survive: a reviewer's browser never sees the original bytes (metadata, exploits).
    A JPEG at quality 85: a photograph's PNG thumbnail was 99 KiB and 19 ms to encode, its JPEG is 18
    KiB in 0.4 ms (scikit-image's 19 photographs at 320 px; WebP at quality 80: 12 KiB in 7.5 ms), and
    the thumbnail was most of an analysis job's WAL (docs/performance.md). The pixels are RGB already
    (transparency laid onto white by ``flattened``)."""
    small = image.copy()
    small.thumbnail(THUMBNAIL_SIZE)
    buffer = io.BytesIO()
    small.save(buffer, "JPEG", quality=THUMBNAIL_QUALITY)
    return buffer.getvalue()


def dhash(image: Image.Image) -> int:
    grey = image.convert("L").resize((9, 8), Image.Resampling.LANCZOS)
    pixels = list(grey.get_flattened_data())
    bits = 0
    for row in range(8):
        for column in range(8):
            left, right = pixels[row * 9 + column], pixels[row * 9 + column + 1]
            bits = (bits << 1) | (left > right)
    return bits


def similarity(a: int, b: int) -> float:
    """1.0 for identical hashes, 0.0 for opposite ones."""
    return 1 - bin(a ^ b).count("1") / HASH_BITS
