"""Answers for private media a caller has already been allowed to see (the views
check access first): the file streamed through the arena, or, with an S3 store and
``ARENA_MEDIA_SIGNED_URL_S`` > 0, a redirect to a URL signed for that long
(arena_site/media.py). A name that is missing or leaves the storage is a 404."""

import posixpath

from django.http import FileResponse, Http404, HttpResponse, HttpResponseRedirect
from django.utils.http import content_disposition_header

from arena_site.media import media_head, media_open, media_signed_url, media_signing
from battles.attachments import SNIFF_BYTES, served_content_type

CACHE_CONTROL = "private, max-age=3600"


def _no_store_redirect(url: str) -> HttpResponse:
    """The redirect itself is not kept: the URL in it expires."""
    response = HttpResponseRedirect(url)
    response["Cache-Control"] = "private, no-store"
    return response


def private_image(name: str) -> HttpResponse:
    """A step screenshot (a PNG the arena took itself)."""
    handle = media_open(name)
    if handle is None:
        raise Http404("No such screenshot.")
    url = media_signed_url(name, content_type="image/png")
    if url is not None:
        handle.close()
        return _no_store_redirect(url)
    response = FileResponse(handle, content_type="image/png")
    response["Cache-Control"] = CACHE_CONTROL
    return response


def private_download(name: str, shown: str) -> HttpResponse:
    """A private file as a download under the name ``shown``: never rendered by the
    browser (attachment, nosniff, a type that is not HTML, a sandboxing CSP), cached
    only privately. The type comes from the name and the file's first bytes. A signed
    URL carries the type and the disposition; the store adds no nosniff or CSP header,
    which the type (never HTML) and ``attachment`` make moot (docs/media.md)."""
    # A signed URL names the stored object: only when that name is the one shown (a
    # judge's blinded name is never undone by a URL).
    if media_signing() and (
        posixpath.basename(name) == shown or not name.startswith("deliveries/")
    ):
        head = media_head(name, SNIFF_BYTES)
        if head is None:
            raise Http404("No such file.")
        url = media_signed_url(
            name,
            content_type=served_content_type(shown, head),
            disposition=content_disposition_header(as_attachment=True, filename=shown),
        )
        if url is not None:
            return _no_store_redirect(url)
    handle = media_open(name)
    if handle is None:
        raise Http404("No such file.")
    head = handle.read(SNIFF_BYTES)
    handle.seek(0)
    response = FileResponse(
        handle, as_attachment=True, filename=shown, content_type=served_content_type(shown, head)
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = CACHE_CONTROL
    return response
