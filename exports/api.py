"""The open-data API (docs/open-data.md): an index of what is published, each core
table as JSON Lines, and the whole export as a tar.gz. Public, like the leaderboard:
everything here is the published record (decided battles, consented, past the delay,
judges pseudonymised); downloads are bounded per client address per hour."""

import json
import re
import tempfile

from django.conf import settings
from django.http import FileResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import PUBLIC_ARENA_SLUG, Arena
from arena_site.exceptions import ApplicationError
from arena_site.ratelimit import downloads_count
from arena_site.schema import error_response
from exports.schema import BY_NAME, CORE_TABLES, DATA_CARD_VERSION, SCHEMA_VERSION
from exports.selectors import publication_note, publication_outlook
from exports.services import export_archive
from exports.tables import ExportScope, table_rows

SLUG = re.compile(r"[-a-zA-Z0-9_]{1,50}")
ARENA_PARAMETER = OpenApiParameter(
    "arena",
    required=False,
    type={"type": "string", "pattern": f"^{SLUG.pattern}$", "maxLength": 50},
    description=f"The arena's slug (default: {PUBLIC_ARENA_SLUG}); only public arenas.",
)
DISABLED = error_response(
    403,
    "open_data_disabled: this arena's operator turned the API off "
    "(ARENA_EXPORT_API); ask them for a published export.",
)
NOT_FOUND = error_response(404, "not_found: no public arena with that slug.")
RATE_LIMITED = OpenApiResponse(
    error_response(429).response,
    description="rate_limited: more downloads from your address this hour than "
    "ARENA_EXPORT_RATE_PER_HOUR; Retry-After says when to try again (or anonymous calls "
    "per address over their per-minute limit).",
)


def _open_arena(request) -> Arena:
    """The public arena the request names; 403 when the API is off, 400/404 otherwise."""
    if not settings.ARENA.export_api:
        raise ApplicationError(
            "The open-data API is turned off on this arena (ARENA_EXPORT_API); ask its "
            "operator for a published export.",
            code="open_data_disabled",
            status=403,
        )
    slug = request.query_params.get("arena", PUBLIC_ARENA_SLUG)
    if not SLUG.fullmatch(slug):
        raise ApplicationError(
            "arena must be an arena's slug: 1 to 50 letters, digits, - or _.",
            code="invalid_parameter",
        )
    if slug == PUBLIC_ARENA_SLUG:
        return Arena.objects.public()
    # (the demo board's arena is not public data: its votes are simulated)
    arena = Arena.objects.filter(slug=slug, team=None, demo=False).first()
    if arena is None:
        raise ApplicationError(
            f"No public arena {slug!r}; GET /api/open-data/ without ?arena= for the public one.",
            code="not_found",
            status=404,
        )
    return arena


def _count_download(request) -> None:
    downloads_count(
        request, name="open-data", what="open-data downloads",
        instead=", or use a published export (manage.py export_data)",
    )  # fmt: skip


def _spooled(write, *, filename: str, content_type: str) -> FileResponse:
    """The body ``write(file)`` produces, spooled to a temporary file and streamed."""
    body = tempfile.TemporaryFile()  # noqa: SIM115 (the FileResponse closes it)
    try:
        write(body)
    except BaseException:
        body.close()
        raise
    body.seek(0)
    return FileResponse(body, as_attachment=True, filename=filename, content_type=content_type)


def _scope(arena: Arena) -> ExportScope:
    return ExportScope.build(arena_id=arena.pk, arena_slug=arena.slug, now=timezone.now())


class OpenDataTableOutput(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    url = serializers.CharField(help_text="Its JSON Lines download.")


class OpenDataIndexOutput(serializers.Serializer):
    arena = serializers.CharField()
    schema_version = serializers.CharField()
    data_card_version = serializers.CharField()
    delay_days = serializers.IntegerField(
        min_value=0, help_text="Battles are published this many days after their decision."
    )
    cutoff = serializers.DateTimeField(help_text="Battles decided after this are not published.")
    download_limit_per_hour = serializers.IntegerField(
        min_value=1, help_text="Downloads (tables or archives) per client address per hour."
    )
    published_battles = serializers.IntegerField(
        min_value=0, help_text="Battles (rated or excluded) the tables hold now."
    )
    waiting_battles = serializers.IntegerField(
        min_value=0, help_text="Battles decided within the delay, published once it passes."
    )
    next_publication_at = serializers.DateTimeField(
        allow_null=True, help_text="When the first waiting battle is published; null: none."
    )
    note = serializers.CharField(
        help_text="In a sentence: when battles are published, and why the tables are empty "
        "when they are."
    )
    archive_url = serializers.CharField(help_text="Every core table, JSONL and Parquet, tar.gz.")
    tables = OpenDataTableOutput(many=True)
    schema = serializers.JSONField(help_text="schema.json: every table's columns and types.")


def _arena_query(arena: Arena) -> str:
    return "" if arena.slug == PUBLIC_ARENA_SLUG else f"?arena={arena.slug}"


class OpenDataIndexApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(
        parameters=[ARENA_PARAMETER],
        responses={200: OpenDataIndexOutput, 403: DISABLED, 404: NOT_FOUND, 429: RATE_LIMITED},
        operation_id="open_data_index",
        description="What the open data of a public arena holds: the tables, their schema, "
        "the publication delay, and where to download them. Free of the download limit.",
    )
    def get(self, request):
        from exports.schema import schema_document

        arena = _open_arena(request)
        scope = _scope(arena)
        query = _arena_query(arena)
        outlook = publication_outlook(
            arena_id=arena.pk, cutoff=scope.cutoff, delay_days=scope.delay_days
        )
        tables = [
            {
                "name": name,
                "description": BY_NAME[name].description,
                "url": f"/api/open-data/{name}.jsonl{query}",
            }
            for name in CORE_TABLES
        ]
        return Response(
            OpenDataIndexOutput(
                {
                    "arena": arena.slug,
                    "schema_version": SCHEMA_VERSION,
                    "data_card_version": DATA_CARD_VERSION,
                    "delay_days": scope.delay_days,
                    "cutoff": scope.cutoff,
                    "download_limit_per_hour": settings.ARENA.export_rate_per_hour,
                    "published_battles": outlook["published"],
                    "waiting_battles": outlook["waiting"],
                    "next_publication_at": outlook["next_at"],
                    "note": publication_note(outlook, delay_days=scope.delay_days),
                    "archive_url": f"/api/open-data/archive.tar.gz{query}",
                    "tables": tables,
                    "schema": schema_document(),
                }
            ).data
        )


class OpenDataTableApi(APIView):
    """One core table as JSON Lines; ``table_api`` makes one path per table."""

    permission_classes = [AllowAny]
    authentication_classes = []
    table = ""

    def get(self, request):
        arena = _open_arena(request)
        _count_download(request)
        scope = _scope(arena)

        def write(body) -> None:
            for row in table_rows(self.table, scope):
                body.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode())
                body.write(b"\n")

        return _spooled(
            write, filename=f"{arena.slug}-{self.table}.jsonl", content_type="application/jsonl"
        )


def table_api(name: str) -> type[OpenDataTableApi]:
    """The view of ``GET /api/open-data/<name>.jsonl``, documented as its own operation."""
    schema = extend_schema(
        operation_id=f"open_data_{name}",
        parameters=[ARENA_PARAMETER],
        responses={
            (200, "application/jsonl"): OpenApiResponse(
                OpenApiTypes.STR,
                description=f"One {name} row a line, as schema.json's {name} table says.",
            ),
            403: DISABLED,
            404: NOT_FOUND,
            429: RATE_LIMITED,
        },
        description=f"The {name} table of the open data as JSON Lines: "
        f"{BY_NAME[name].description} Counts against the hourly download limit.",
    )
    view_name = f"OpenData{name.title()}Api"
    attributes = {"table": name, "__module__": __name__, "__qualname__": view_name}
    return extend_schema_view(get=schema)(type(view_name, (OpenDataTableApi,), attributes))


TABLE_APIS = {name: table_api(name) for name in CORE_TABLES}


class OpenDataUnknownApi(APIView):
    """Any other path under /api/open-data/: a 404 that says what there is instead
    (left out of the schema: it documents only the files that exist)."""

    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(exclude=True)
    def get(self, request, rest: str):
        tables = ", ".join(f"{name}.jsonl" for name in CORE_TABLES)
        raise ApplicationError(
            f"No open-data file {rest!r}; there are {tables} and archive.tar.gz "
            "(trajectories only in a published export). GET /api/open-data/ lists them.",
            code="not_found",
            status=404,
        )


class OpenDataArchiveApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(
        parameters=[ARENA_PARAMETER],
        responses={
            (200, "application/gzip"): OpenApiResponse(
                OpenApiTypes.BINARY,
                description="A tar.gz of one directory: every core table as JSONL and "
                "Parquet, schema.json, DATA_CARD.md and manifest.json.",
            ),
            403: DISABLED,
            404: NOT_FOUND,
            429: RATE_LIMITED,
        },
        operation_id="open_data_archive",
        description="The open data of a public arena as one archive, written on request. "
        "Counts against the hourly download limit.",
    )
    def get(self, request):
        arena = _open_arena(request)
        _count_download(request)
        now = timezone.now()
        return _spooled(
            lambda body: export_archive(arena_id=arena.pk, target=body, now=now),
            filename=f"agent-arena-{arena.slug}-{now:%Y%m%d}.tar.gz",
            content_type="application/gzip",
        )
