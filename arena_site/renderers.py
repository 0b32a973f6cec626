"""Strict JSON on the way out of HTTP (``arena_site.strict_json`` holds the rule: a
number that is not finite is null, "not available").

- ``StrictJSONRenderer``: the API's renderer (``REST_FRAMEWORK``'s
  DEFAULT_RENDERER_CLASSES). DRF's own refuses NaN by raising, which turns an answer
  holding one infinite interval into a 500; this one writes null instead.
- ``StrictJSONMiddleware``: every other JSON response (``JsonResponse`` of the pages,
  the probes, the error bodies, the evaluation record download). Django's encoder writes
  ``NaN``/``Infinity``; a JSON body holding either token is parsed and written again
  with null in their place. The API's answers, which the renderer wrote, pass unread;
  other bodies pass untouched (one header read and, for JSON, one search of the
  bytes); streamed bodies (the open-data files) are written strict
  where they are made (``exports.writers``).
"""

import json

from django.http import HttpRequest, HttpResponse
from rest_framework.renderers import JSONRenderer

from arena_site import strict_json


class StrictJSONRenderer(JSONRenderer):
    """DRF's renderer (strict: ``allow_nan=False``); an answer it refuses for a
    non-finite number is rendered again with null in its place. The common answer is
    rendered once, never walked."""

    strict = True

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except ValueError as exc:
            if "Out of range float values" not in str(exc):
                raise
        return super().render(strict_json.finite(data), accepted_media_type, renderer_context)


def strict_body(content: bytes) -> bytes | None:
    """``content`` written again without NaN/Infinity when it holds either as a JSON
    number; None when there is nothing to change (or it is not JSON at all)."""
    if not any(token in content for token in strict_json.NON_FINITE):
        return None
    try:
        document = json.loads(content)
    except ValueError:
        return None
    if strict_json.finite(document) is document:
        return None  # the tokens were inside strings
    return strict_json.dumps(document, separators=(",", ":")).encode()


class StrictJSONMiddleware:
    """Rewrites a JSON response body that holds NaN or Infinity (see the module)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        kind = response.get("Content-Type", "")
        if getattr(response, "streaming", False) or "json" not in kind:
            return response
        if isinstance(getattr(response, "accepted_renderer", None), StrictJSONRenderer):
            return response  # the API's answers: written strict already, not searched again
        body = strict_body(response.content)
        if body is not None:
            response.content = body
            if response.has_header("Content-Length"):  # set by CommonMiddleware, inside
                response["Content-Length"] = str(len(body))
        return response
