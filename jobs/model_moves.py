"""For the migrations that move models between apps with their tables (``SeparateDatabaseAndState``):
the models' content types — and with them every permission and group grant on them — move too."""


def content_types_move(apps, models: tuple[str, ...], *, source: str, target: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    permission = apps.get_model("auth", "Permission")
    for model in models:
        old = content_type.objects.filter(app_label=source, model=model).first()
        if old is None:
            continue
        new = content_type.objects.filter(app_label=target, model=model).first()
        if new is None:
            old.app_label = target
            old.save(update_fields=["app_label"])
            continue
        # Both exist (one was created meanwhile): keep the target's, with every grant of the source's.
        for stale in permission.objects.filter(content_type=old):
            kept, _ = permission.objects.get_or_create(
                content_type=new, codename=stale.codename, defaults={"name": stale.name}
            )
            for group in stale.group_set.all():
                group.permissions.add(kept)
            for user in stale.user_set.all():
                user.user_permissions.add(kept)
        old.delete()
