from django.contrib import admin
from django.urls import path

import pgflow_django.observability.metrics

urlpatterns = [path("admin/", admin.site.urls), path("metrics/", pgflow_django.observability.metrics.view)]
