"""The public leaderboard API."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Arena
from ratings.selectors import leaderboard_rows
from ratings.services import leaderboard_served


class LeaderboardApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        arena = Arena.objects.public()
        leaderboard_served(arena_id=arena.pk)
        return Response({"arena": arena.slug, "rows": leaderboard_rows(arena_id=arena.pk)})
