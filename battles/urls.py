from django.urls import path

from agents import views as agent_views
from battles import api, drive_views, event_stream, views

app_name = "battles"

urlpatterns = [
    path("submit/", views.submit, name="submit"),
    path("battles/<int:battle_id>/", views.battle_page, name="detail"),
    path("battles/<int:battle_id>/panel/", views.battle_panel, name="panel"),
    # Server-Sent Events of a coding battle's phases, for command-line clients
    path("battles/<int:battle_id>/events/", event_stream.battle_events, name="events"),
    path("battles/<int:battle_id>/runs/<str:side>/", views.run_page, name="run"),
    path("battles/<int:battle_id>/end/<str:side>/", views.end_side, name="end-side"),
    # Conversations with both sides (docs/conversations.md): the page's box and forms,
    # and the same commands in the API (the "id" converter: arena_site/urls.py).
    path("battles/<int:battle_id>/conversation/", views.conversation_part, name="conversation"),
    path("battles/<int:battle_id>/follow-ups/", views.follow_up_post, name="follow-up"),
    path(
        "battles/<int:battle_id>/questions/<int:question_id>/answer/",
        views.answer_post,
        name="answer",
    ),
    path(
        "api/battles/<id:pk>/conversation/",
        api.BattleConversationApi.as_view(),
        name="api-conversation",
    ),
    path("api/battles/<id:pk>/follow-ups/", api.FollowUpCreateApi.as_view(), name="api-follow-up"),
    path(
        "api/battles/<id:pk>/questions/<id:question_id>/answer/",
        api.QuestionAnswerApi.as_view(),
        name="api-answer",
    ),
    path(
        "battles/<int:battle_id>/screens/<str:side>/<int:index>.png",
        views.step_screenshot,
        name="screenshot",
    ),
    path(
        "battles/<int:battle_id>/attachments/<int:index>",
        views.attachment_download,
        name="attachment",
    ),
    path(
        "battles/<int:battle_id>/deliveries/<str:side>/<str:name>",
        views.delivery_download,
        name="delivery",
    ),
    # Agents' status and test drives (battles/drive_views.py): their team and admins.
    path("my-agents/", drive_views.agents_status, name="agents-status"),
    # issue 37 point 4: a team registers and changes its agents from the browser
    path("my-agents/new/", agent_views.agent_new, name="agent-new"),
    path("my-agents/<int:agent_id>/", agent_views.agent_page, name="agent"),
    path(
        "my-agents/<int:agent_id>/test-drives/",
        drive_views.agent_test_drives,
        name="test-drives-of",
    ),
    path("test-drives/<int:drive_id>/", drive_views.test_drive_page, name="test-drive"),
    path(
        "test-drives/<int:drive_id>/screens/<int:index>.png",
        drive_views.test_drive_screenshot,
        name="test-drive-screenshot",
    ),
]
