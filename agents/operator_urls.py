"""The operator page's routes (agents/operator_views.py, docs/human-baseline.md)."""

from django.urls import path

from agents import operator_views as views

urlpatterns = [
    path("operate/", views.operate_page, name="operate"),
    path("operate/panel/", views.operate_panel, name="operate-panel"),
    path("operate/duty/", views.operate_duty, name="operate-duty"),
    path("operate/lanes/<int:run_id>/screen.png", views.operate_screen, name="operate-screen"),
    path("operate/lanes/<int:run_id>/take/", views.operate_take, name="operate-take"),
    path("operate/lanes/<int:run_id>/act/", views.operate_act, name="operate-act"),
]
