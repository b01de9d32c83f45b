from django.contrib import admin
from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from api.site import api
from dashboard.operations.metrics import metrics_view
from dashboard.receipts_api import router as receipts_router

api.add_router("", receipts_router)  # the console's own resource: a route test's confirmation

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", api.urls),
    path("favicon.ico", RedirectView.as_view(url=static("dashboard/favicon.svg"), permanent=True)),
]
