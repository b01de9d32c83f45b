from django.contrib import admin
from django.urls import path

from api.site import api
from dashboard.operations.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", api.urls),
]
