from django.contrib import admin
from django.urls import path

import pgflow_django.metrics

urlpatterns = [path("admin/", admin.site.urls), path("metrics/", pgflow_django.metrics.view)]
