from django.urls import path

from judging import views

app_name = "judging"

urlpatterns = [
    path("judge/", views.judge_page, name="judge"),
    path("judge/<int:battle_id>/vote/", views.vote, name="vote"),
]
