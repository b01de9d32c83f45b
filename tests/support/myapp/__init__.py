"""A team's own app with Django ``@task`` functions outside any ``tasks`` module, importable but not
in ``INSTALLED_APPS``: a pool meets its tasks only by the module path their jobs carry."""
