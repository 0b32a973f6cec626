from django.urls import path

from judging import views

app_name = "judging"

urlpatterns = [
    path("start/", views.landing, name="landing"),
    path("judge/", views.judge_page, name="judge"),
    path("judge/<int:battle_id>/vote/", views.vote, name="vote"),
    path("judge/<int:battle_id>/undo/", views.undo, name="undo"),
    path("judge/<int:battle_id>/vote/status/", views.vote_state, name="vote-status"),
    path(
        "judge/<int:battle_id>/<str:side>/steps/<int:index>/screenshot",
        views.step_screenshot,
        name="screenshot",
    ),
    path(
        "judge/<int:battle_id>/<str:side>/files/<int:index>",
        views.delivered_file,
        name="file",
    ),
    path("judging/quality/", views.quality_page, name="quality"),
    path("machine-board/", views.machine_board_page, name="machine-board"),
    path("judging/machine-agreement/", views.machine_agreement_page, name="machine-agreement"),
]
