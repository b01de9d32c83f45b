"""An image's declared size is checked before it is decoded: a 340 KB PNG of 9,400 × 9,400 RGBA pixels
would take an analysis worker from ~80 MB to ~760 MB (issue 17, finding 6)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.big_png import png_declaring
from workers.pipeline.images import ImageRefused, decode

ROOT = Path(__file__).resolve().parents[2]
PEAK_BOUND_MB = 200  # Python, Django and Pillow loaded: ~80 MB


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("images") / "bomb.png"
    path.write_bytes(png_declaring(9400, 9400))
    return path


def test_an_image_over_the_pixel_limit_is_refused_from_its_header(bomb, settings):
    assert bomb.stat().st_size < 400_000
    with pytest.raises(ImageRefused, match="88.4 megapixels; the limit is 25"):
        decode(bomb.read_bytes())


def test_a_worker_decoding_it_stays_under_the_memory_bound(bomb):
    script = (
        "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.test_settings');"
        "django.setup();"
        "from workers.pipeline.images import ImageRefused, decode\n"
        f"try:\n    decode(open({str(bomb)!r}, 'rb').read())\nexcept ImageRefused:\n    pass\n"
        # VmHWM, this process's own peak: ru_maxrss would carry the forking test process's over execve
        "print(next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM')) // 1024)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < PEAK_BOUND_MB


def _peak_decoding(path: Path) -> tuple[int, int, str]:
    """(peak MB of a fresh process before and after it decodes ``path``, the decoded image's size)."""
    script = (
        "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.test_settings');"
        "django.setup();"
        "from workers.pipeline.images import decode\n"
        "def peak(): return next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM')) // 1024\n"
        f"data = open({str(path)!r}, 'rb').read()\n"
        "before = peak()\n"
        "image = decode(data)\n"
        "print(image.width, image.height, image.pixels.size)\n"
        "print(before, peak())"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *_, described, peaks = done.stdout.strip().splitlines()
    before, after = map(int, peaks.split())
    return before, after, described


@pytest.mark.parametrize(
    "mode,decoded_mb",
    [
        ("I;16", 48),  # a 16-bit grey PNG: a 64-bit copy of it cost ~450 MB
        ("RGBA", 96),  # with alpha: flattened at full size it made four copies (~390 MB)
        ("LA", 96),  # Pillow keeps grey with alpha in four bytes a pixel too
    ],
)
def test_an_image_within_the_pixel_limit_costs_its_decoded_size_and_little_more(tmp_path, mode, decoded_mb):
    from PIL import Image

    path = tmp_path / f"{mode.replace(';', '')}.png"
    Image.new(mode, (5000, 5000)).save(path, "PNG", optimize=True)  # 25 megapixels, flat: small on the wire
    assert path.stat().st_size < 200_000
    before, after, described = _peak_decoding(path)
    assert described.startswith("5000 5000 (2500, 2500)"), described  # reduced, then flattened
    # The decoded image itself, plus the 8-bit RGB result and its thumbnail copy (19 MB each) and a strip.
    assert after - before < decoded_mb + 60, f"{mode}: {after - before} MB above the {before} MB of a worker"


def test_a_webp_has_its_own_pixel_budget_and_stays_within_it(tmp_path):
    """Issue 54, item 9: a 45 KB WebP of 25 megapixels cost about 384 MB to decode."""
    from PIL import Image

    from workers.pipeline.images import WEBP_MAX_PIXELS, ImageRefused, decode

    big = tmp_path / "big.webp"
    Image.new("RGB", (5000, 5000), (10, 20, 30)).save(big, "WEBP", quality=50)
    assert big.stat().st_size < 100_000
    with pytest.raises(ImageRefused, match="a WebP's limit is 8"):
        decode(big.read_bytes())
    largest = tmp_path / "largest.webp"
    side = int(WEBP_MAX_PIXELS**0.5)
    Image.new("RGB", (side, side), (10, 20, 30)).save(largest, "WEBP", quality=50)
    before, after, described = _peak_decoding(largest)
    assert described.startswith(f"{side} {side}"), described
    assert after - before < 160, f"a WebP at its budget: {after - before} MB above the {before} MB of a worker"
