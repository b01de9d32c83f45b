"""The originals registered before analysis@2 get their fingerprints, each in a transaction of its own
(``atomic = False``): the schema change before it is committed, so the tables are not locked while
hundreds of images are fingerprinted, and an original that cannot be decoded is marked, not fatal.
``manage.py fingerprint_assets`` does the same after a later fingerprint version."""

from django.db import migrations


def fingerprint_assets(apps, schema_editor):
    from workers.pipeline.services import assets_fingerprint

    assets_fingerprint(
        assets=apps.get_model("workers", "ProtectedAsset"),
        bands=apps.get_model("workers", "AssetHashBand"),
        keys=apps.get_model("workers", "AssetKeypointKey"),
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("workers", "0012_robust_matching")]

    operations = [migrations.RunPython(fingerprint_assets, migrations.RunPython.noop)]
