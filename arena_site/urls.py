from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from agents.protocol_api import AgentProtocolApi
from battles.api import BattleDetailApi, BattleListApi, TaskDetailApi, TaskListCreateApi
from judging.api import JudgeNextApi, VoteCreateApi, VoteRetractApi
from ratings.api import LeaderboardApi
from ratings.metrics_views import MetricsApi, metrics_page

api = [
    path("tasks/", TaskListCreateApi.as_view(), name="tasks"),
    path("tasks/<int:pk>/", TaskDetailApi.as_view(), name="task"),
    path("battles/", BattleListApi.as_view(), name="battles"),
    path("battles/<int:pk>/", BattleDetailApi.as_view(), name="battle"),
    path("battles/<int:pk>/votes/", VoteCreateApi.as_view(), name="votes"),
    path("battles/<int:pk>/votes/mine/", VoteRetractApi.as_view(), name="vote-mine"),
    path("judge/next/", JudgeNextApi.as_view(), name="judge-next"),
    path("leaderboard/", LeaderboardApi.as_view(), name="leaderboard"),
    path("metrics/", MetricsApi.as_view(), name="metrics"),
    path("agent-protocol/", AgentProtocolApi.as_view(), name="agent-protocol"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include((api, "api"))),
    path("accounts/", include("accounts.urls")),
    path("metrics/", metrics_page, name="metrics"),
    path("", include("battles.urls")),
    path("", include("judging.urls")),
    path("", include("ratings.urls")),
]
