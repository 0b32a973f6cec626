"""The API's documentation page: Swagger UI at /api/docs/, from the OpenAPI schema at
/api/schema/, its scripts and styles served from this site (drf-spectacular-sidecar),
never from a CDN.

It runs under the site's Content-Security-Policy unchanged: its start-up script is a
file of its own (the "split" view: the page loads ``?script``), and the page carries no
inline script or style. (Redoc was left out: it writes <style> elements at run time and
builds a Web Worker from a blob: URL, which the policy rightly refuses.)"""

from drf_spectacular.views import SpectacularSwaggerSplitView


class SwaggerDocs(SpectacularSwaggerSplitView):
    url_name = "api:schema"
    template_name = "api/swagger.html"
    title = "Agent Arena API"
