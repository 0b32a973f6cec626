from django.urls import path

from environments import views

app_name = "environments"

urlpatterns = [
    path("environments/", views.environment_list, name="list"),
    path("environments/latency", views.environment_latency, name="latency"),
    path("environments/<int:environment_id>/", views.environment_page, name="detail"),
]
