"""The operator's endpoints, answered before any other middleware: ``/healthz`` and
``/readyz`` (arena_site/probes.py) and ``/metrics/prometheus`` (arena_site/prometheus.py).

``OpsEndpointsMiddleware`` goes first in ``MIDDLEWARE`` because what follows it must not
apply to a probe or a scrape: an orchestrator's probe names the pod's address in its
Host header (``ALLOWED_HOSTS`` would answer 400), a plain-HTTP probe must not be
redirected to HTTPS (a 301 counts as healthy), a liveness probe must not be shed under
load (``CapacityMiddleware``'s 503 would get a busy replica restarted), and none of them
needs a session, a CSRF token or a user. Only these three exact paths, GET or HEAD; they
are not in the URLconf, so nothing else can reach their views."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from arena_site import probes, prometheus

ENDPOINTS: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": probes.healthz,
    "/readyz": probes.readyz,
    "/metrics/prometheus": prometheus.metrics,
}


class OpsEndpointsMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response
        # The migrations on disk are read now, at start-up, not by the first probe.
        probes.expected_migrations()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        endpoint = ENDPOINTS.get(request.path_info)
        if endpoint is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = HttpResponse(status=405)
            response["Allow"] = "GET, HEAD"
            return response
        return endpoint(request)
