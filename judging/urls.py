from django.urls import path

from judging import api, views

app_name = "judging"

urlpatterns = [
    path("start/", views.landing, name="landing"),
    path("judge/", views.judge_page, name="judge"),
    path("judge/<int:battle_id>/vote/", views.vote, name="vote"),
    path("judge/<int:battle_id>/undo/", views.undo, name="undo"),
    path("judge/<int:battle_id>/vote/status/", views.vote_state, name="vote-status"),
    path("judge/<int:battle_id>/reasons/", views.reasons_form, name="reasons"),
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
    path("agents/<slug:slug>/reasons/", views.agent_reasons, name="agent-reasons"),
    path("machine-board/", views.machine_board_page, name="machine-board"),
    # the reasons API sits here, beside its pages (the "id" converter is arena_site.urls')
    path(
        "api/battles/<id:pk>/votes/mine/reasons/",
        api.VoteReasonsApi.as_view(),
        name="vote-reasons",
    ),
    path("api/vote-reasons/tags/", api.ReasonTagsApi.as_view(), name="vote-reason-tags"),
    path("judging/machine-agreement/", views.machine_agreement_page, name="machine-agreement"),
]
