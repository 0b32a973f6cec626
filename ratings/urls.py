from django.urls import path

from ratings import views

app_name = "ratings"

urlpatterns = [
    path("", views.leaderboard_page, name="leaderboard"),
    path("matrices/", views.matrices_page, name="matrices"),
    path("method/", views.method_page, name="method"),
    path("agents/<slug:slug>/", views.agent_page, name="agent"),
]
