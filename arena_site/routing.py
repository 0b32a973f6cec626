from django.urls import path

from battles.consumers import BattleConsumer, TestDriveConsumer
from battles.live_consumers import BattleLiveConsumer
from battles.operator_views import OperatorLiveConsumer
from evals.consumers import EvaluationConsumer
from judging.consumers import JudgeConsumer
from ratings.consumers import LeaderboardConsumer

websocket_urlpatterns = [
    path("ws/battles/<int:battle_id>/", BattleConsumer.as_asgi()),
    path("ws/battles/<int:battle_id>/live/", BattleLiveConsumer.as_asgi()),
    path("ws/operate/lanes/<int:run_id>/live/", OperatorLiveConsumer.as_asgi()),
    path("ws/test-drives/<int:drive_id>/", TestDriveConsumer.as_asgi()),
    path("ws/leaderboard/", LeaderboardConsumer.as_asgi()),
    path("ws/judge/", JudgeConsumer.as_asgi()),
    path("ws/evaluations/<int:evaluation_id>/", EvaluationConsumer.as_asgi()),
]
