"""The remote-agent protocol, published for entrants (no account needed)."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.protocol import protocol_document


class AgentProtocolApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(
        responses={200: OpenApiTypes.OBJECT},
        description="The arena-agent protocol: request and reply JSON Schemas, signing, "
        "tools, timeouts and retry rules.",
    )
    def get(self, request):
        return Response(protocol_document())
