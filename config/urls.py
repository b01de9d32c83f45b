from django.contrib import admin
from django.urls import path

from dashboard.metrics import metrics_view
from jobs.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", api.urls),
]
