"""Safe decoding and the perceptual hash, on images made here: hostile files are refused as
permanent errors; copies match, unrelated images do not."""

import io
import struct
import zlib

import pytest
from PIL import Image, ImageDraw

from workers.pipeline.images import ImageRefused, decode, similarity


def artwork(seed: int, size=(400, 300)) -> Image.Image:
    """A structured picture (gradient, shapes) that differs per seed."""
    image = Image.new("RGB", size)
    draw = ImageDraw.Draw(image)
    for x in range(size[0]):
        draw.line([(x, 0), (x, size[1])], fill=((x * seed) % 256, (x * 3 + seed * 40) % 256, (255 - x) % 256))
    for n in range(6):
        box = [(n * 61 * seed) % 300, (n * 37 + seed * 13) % 200]
        draw.ellipse([box[0], box[1], box[0] + 80, box[1] + 60], fill=((n * 90) % 256, seed * 50 % 256, 30))
    return image


def encoded(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b""))
        + chunk(b"IEND", b"")
    )


def test_an_exact_copy_matches_fully():
    original = artwork(1)
    assert similarity(decode(encoded(original, "PNG")).dhash, decode(encoded(original, "PNG")).dhash) == 1.0


def test_a_resized_recompressed_copy_still_matches():
    original = artwork(1)
    copy = original.resize((200, 150)).convert("RGB")
    a = decode(encoded(original, "PNG"))
    b = decode(encoded(copy, "JPEG", quality=55))
    assert (b.format, b.width) == ("JPEG", 200)
    assert similarity(a.dhash, b.dhash) >= 0.9


def test_an_unrelated_image_does_not_match():
    assert similarity(decode(encoded(artwork(1), "PNG")).dhash, decode(encoded(artwork(4), "PNG")).dhash) <= 0.75


@pytest.mark.parametrize("fmt", ["GIF", "WEBP"])
def test_the_other_accepted_formats_decode(fmt):
    assert decode(encoded(artwork(2), fmt)).format == fmt


def test_a_pixel_bomb_is_refused_before_decoding():
    with pytest.raises(ImageRefused, match="decompression bomb"):
        decode(png_header_only(100_000, 100_000))


def test_eps_is_never_opened():
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nnewpath 0 0 moveto 10 10 lineto stroke\n"
    with pytest.raises(ImageRefused, match="not one of the accepted formats"):
        decode(eps)


def test_a_truncated_jpeg_is_refused():
    data = encoded(artwork(3), "JPEG", quality=90)
    with pytest.raises(ImageRefused, match="corrupt or truncated"):
        decode(data[: len(data) // 2])


def test_text_pretending_to_be_an_image_is_refused():
    with pytest.raises(ImageRefused):
        decode(b"<html>not an image</html>")


def test_a_decode_that_runs_past_its_own_budget_is_refused_but_the_jobs_own_limit_is_retried(monkeypatch):
    """The image's fault (its own decoding budget spent) is permanent; the job's time running out
    around it (a slow site before the decode) stays the transient JobTimeout."""
    import io as _io

    from PIL import Image as _Image

    from workers.pipeline import images
    from workers.runtime.pool import JobTimeout, time_limit

    buffer = _io.BytesIO()
    _Image.effect_noise((5000, 4800), 64).save(buffer, "PNG")  # noise: inflating it takes ~0.1 s
    data = buffer.getvalue()
    monkeypatch.setattr(images, "DECODE_SECONDS", 0.001)  # far below any decode of 24 megapixels
    with pytest.raises(images.DecodeTimedOut, match="took over 0.001 s"):
        images.decode(data)
    monkeypatch.setattr(images, "DECODE_SECONDS", 30.0)
    with pytest.raises(JobTimeout), time_limit(0.05):
        images.decode(data)


def test_the_thumbnail_is_the_pixels_alone_as_a_small_jpeg():
    """Re-encoded from the decoded pixels: no byte of the original, its metadata or its transparency
    survives; at most 320 px, a transparent image laid onto white."""
    original = artwork(3, (1200, 900))
    exif = Image.Exif()
    exif[0x010E] = "secret description"  # ImageDescription
    thumbnail = Image.open(io.BytesIO(decode(encoded(original, "JPEG", quality=95, exif=exif)).thumbnail))
    assert (thumbnail.format, thumbnail.mode, thumbnail.size) == ("JPEG", "RGB", (320, 240))
    assert not thumbnail.getexif() and "exif" not in thumbnail.info
    clear = Image.new("RGBA", (40, 40), (255, 0, 0, 0))
    pixel = Image.open(io.BytesIO(decode(encoded(clear, "PNG")).thumbnail)).convert("RGB").getpixel((20, 20))
    assert all(channel >= 250 for channel in pixel), pixel
