"""The demo web's pages: a request in, a response out, nothing else (docs/demo-web.md).

Pure: no sockets, no clock, no files. :func:`respond` routes a method and request
target to a page rendered from :mod:`sandboxes.demoweb.data` with small string
templates (every value escaped). Plain server-rendered HTML that needs no script, a
little CSS so a screenshot looks like a real site; every page has one ``<title>``, one
``<h1>`` and the same nav bar.
"""

import html
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from sandboxes.demoweb import data

QUERY_MAX_CHARS = 200
FORM_MAX_FIELDS = 20
HTML = "text/html; charset=utf-8"
FORM_TYPE = "application/x-www-form-urlencoded"
NAV = (
    ("/", "Home"),
    ("/news/", "News"),
    ("/directory/", "Directory"),
    ("/contact/", "Contact"),
    ("/downloads/", "Downloads"),
)
ALLOWED = {"GET", "HEAD"}
ALLOWED_CONTACT = {"GET", "HEAD", "POST"}

CSS = """
*{box-sizing:border-box}
body{margin:0;font:17px/1.5 "DejaVu Sans",Arial,sans-serif;color:#1d2733;background:#f4f6f8}
header.top{background:#1f4e79;color:#fff;padding:14px 32px;display:flex;align-items:center;gap:40px}
.brand{font-weight:bold;font-size:21px;letter-spacing:.3px}
nav a{color:#fff;text-decoration:none;margin-right:22px;padding:4px 2px}
nav a[aria-current=page]{border-bottom:3px solid #ffd166}
main{max-width:960px;margin:28px auto;background:#fff;padding:28px 36px;border-radius:6px;
box-shadow:0 1px 3px rgba(0,0,0,.12)}
h1{margin-top:0;color:#1f4e79}
a{color:#1a5fb4}
footer{max-width:960px;margin:0 auto 28px;color:#5c6773;font-size:14px;padding:0 4px}
ul.news{list-style:none;padding:0}ul.news li{padding:8px 0;border-bottom:1px solid #e3e7eb}
time{color:#5c6773;margin-right:12px;font-variant-numeric:tabular-nums}
table{border-collapse:collapse;width:100%;margin-top:12px}
th,td{text-align:left;padding:7px 10px;border-bottom:1px solid #e3e7eb}
th{background:#eef2f6}
form.search{display:flex;gap:10px;align-items:center;margin-bottom:8px}
label{font-weight:bold}
input,select,textarea{font:inherit;padding:6px 8px;border:1px solid #9aa5b1;border-radius:4px}
form.contact label{display:block;margin-top:14px}
form.contact input,form.contact select,form.contact textarea{width:100%;max-width:520px}
button{font:inherit;background:#1f4e79;color:#fff;border:0;border-radius:4px;padding:7px 20px;
margin-top:16px;cursor:pointer}
form.search button{margin-top:0}
.error{background:#fdecea;color:#8a1c12;border:1px solid #f5c2bd;padding:10px 14px;
border-radius:4px}
.results{font-weight:bold}
.cards{display:grid;grid-template-columns:repeat(2,1fr);gap:16px}
.card{border:1px solid #e3e7eb;border-radius:6px;padding:14px 18px}
.reference{font-size:22px;font-family:"DejaVu Sans Mono",monospace}
dl{display:grid;grid-template-columns:max-content 1fr;gap:6px 18px}dt{font-weight:bold}
dd{margin:0;white-space:pre-wrap}
"""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = HTML
    headers: tuple[tuple[str, str], ...] = ()


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _layout(title: str, heading: str, content: str, *, section: str = "") -> str:
    links = "".join(
        f'<a href="{href}"{" aria-current=page" if href == section else ""}>{label}</a>'
        for href, label in NAV
    )
    full_title = data.SITE_NAME if title == data.SITE_NAME else f"{title} - {data.SITE_NAME}"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(full_title)}</title><style>{CSS}</style></head><body>"
        f'<header class="top"><span class="brand">{esc(data.SITE_NAME)}</span>'
        f'<nav aria-label="Main">{links}</nav></header>'
        f"<main><h1>{esc(heading)}</h1>{content}</main>"
        "<footer>Demo Town Portal is a demonstration site served inside the arena. "
        "Its people, places and numbers are made up.</footer></body></html>\n"
    )


def _page(status: int, title: str, heading: str, content: str, *, section: str = "") -> Response:
    body = _layout(title, heading, content, section=section).encode()
    return Response(status, body)


def _not_found(path: str) -> Response:
    content = (
        f"<p>There is no page at <code>{esc(path)}</code>. "
        'Try the links above, or start from the <a href="/">home page</a>.</p>'
    )
    return _page(404, "Page not found", "Page not found", content)


def _bad_request(message: str) -> Response:
    return _page(400, "Bad request", "Bad request", f'<p class="error">{esc(message)}</p>')


def _method_not_allowed(allowed: set[str]) -> Response:
    listed = ", ".join(sorted(allowed))
    page = _page(
        405,
        "Method not allowed",
        "Method not allowed",
        f"<p>This page answers {esc(listed)} requests only.</p>",
    )
    return Response(page.status, page.body, headers=(("Allow", listed),))


def _redirect(location: str) -> Response:
    return Response(
        301,
        f'<p>Moved to <a href="{esc(location)}">{esc(location)}</a>.</p>'.encode(),
        headers=(("Location", location),),
    )


# --- pages -----------------------------------------------------------------------------


def home() -> Response:
    latest = "".join(
        f'<li><time datetime="{a.date}">{a.date}</time> <a href="{a.path}">{esc(a.title)}</a></li>'
        for a in data.ARTICLES[:3]
    )
    cards = (
        ("/news/", "News", "What is happening in Demo Town, newest first."),
        (
            "/directory/",
            "Directory",
            "Libraries, pools, shops and services: phone numbers "
            "and opening hours, searchable by name or district.",
        ),
        ("/contact/", "Contact", "Send the town office a message."),
        ("/downloads/", "Downloads", "Opening hours and collection days as files."),
    )
    content = (
        "<p>Welcome to the portal of Demo Town: news, a directory of public places and "
        "shops, a contact form and files to download.</p>"
        '<div class="cards">'
        + "".join(
            f'<div class="card"><h2><a href="{href}">{label}</a></h2><p>{esc(text)}</p></div>'
            for href, label, text in cards
        )
        + f'</div><h2>Latest news</h2><ul class="news">{latest}</ul>'
    )
    return _page(200, data.SITE_NAME, data.SITE_NAME, content, section="/")


def news_list() -> Response:
    items = "".join(
        f'<li><time datetime="{a.date}">{a.date}</time> <a href="{a.path}">{esc(a.title)}</a></li>'
        for a in data.ARTICLES
    )
    content = f'<p>All articles, newest first.</p><ul class="news">{items}</ul>'
    return _page(200, "News", "News", content, section="/news/")


def article(item: data.Article) -> Response:
    paragraphs = "".join(f"<p>{esc(p)}</p>" for p in item.paragraphs)
    content = (
        f'<p class="meta">Published <time datetime="{item.date}">{item.date}</time> '
        f'by <span class="author">{esc(item.author)}</span></p>{paragraphs}'
        '<p><a href="/news/">Back to all news</a></p>'
    )
    return _page(200, item.title, item.title, content, section="/news/")


def directory(query: list[str] | None) -> Response:
    q = (query or [""])[0]
    error = ""
    if len(q) > QUERY_MAX_CHARS:
        error = f"The search text is too long: use at most {QUERY_MAX_CHARS} characters."
        q_shown, rows, message = q[:QUERY_MAX_CHARS], [], ""
    else:
        q_shown, rows = q, data.directory_search(q)
        text = q.strip()
        if not text:
            message = ""
        elif rows:
            message = f"{len(rows)} results for \u201c{text}\u201d"
        else:
            message = f"No results for \u201c{text}\u201d"
    form = (
        '<form class="search" method="get" action="/directory/" role="search">'
        '<label for="q">Search</label>'
        f'<input id="q" name="q" type="search" value="{esc(q_shown)}" size="30" '
        'placeholder="Name or district">'
        '<button type="submit">Search</button></form>'
    )
    parts = ["<p>Public places, shops and services of Demo Town.</p>", form]
    if error:
        parts.append(f'<p class="error" role="alert">{esc(error)}</p>')
    if message:
        parts.append(f'<p class="results" role="status">{esc(message)}</p>')
    if rows:
        body = "".join(
            f"<tr><td>{esc(p.name)}</td><td>{esc(p.district)}</td>"
            f"<td>{esc(p.phone)}</td><td>{esc(p.hours)}</td></tr>"
            for p in rows
        )
        parts.append(
            "<table><thead><tr><th>Name</th><th>District</th><th>Phone</th>"
            f"<th>Opening hours</th></tr></thead><tbody>{body}</tbody></table>"
        )
    elif not error:
        parts.append("<p>Try a district such as Riverside or Old Town, or part of a name.</p>")
    return _page(
        400 if error else 200, "Directory", "Directory", "".join(parts), section="/directory/"
    )


def _contact_form(values: dict[str, str], errors: list[str]) -> str:
    alert = ""
    if errors:
        alert = (
            '<div class="error" role="alert"><p>Your message was not sent:</p><ul>'
            + "".join(f"<li>{esc(e)}</li>" for e in errors)
            + "</ul></div>"
        )
    options = "".join(
        f"<option{' selected' if values.get('topic') == t else ''}>{t}</option>"
        for t in data.TOPICS
    )
    # novalidate: a missing or odd value comes back from the server as words in the
    # page (what a text-reading agent sees), not as the browser's validation bubble.
    return (
        "<p>Write to the town office. We answer within two working days.</p>"
        f'{alert}<form class="contact" method="post" action="/contact/" novalidate>'
        '<label for="name">Name</label>'
        f'<input id="name" name="name" value="{esc(values.get("name", ""))}" '
        f'maxlength="{data.NAME_MAX_CHARS}" autocomplete="name">'
        '<label for="email">Email</label>'
        f'<input id="email" name="email" type="email" value="{esc(values.get("email", ""))}" '
        f'maxlength="{data.EMAIL_MAX_CHARS}" autocomplete="email">'
        f'<label for="topic">Topic</label><select id="topic" name="topic">{options}</select>'
        '<label for="message">Message</label>'
        f'<textarea id="message" name="message" rows="6" maxlength="{data.MESSAGE_MAX_CHARS}">'
        f"{esc(values.get('message', ''))}</textarea>"
        '<button type="submit">Send</button></form>'
    )


def contact_form() -> Response:
    return _page(200, "Contact", "Contact", _contact_form({}, []), section="/contact/")


def contact_submit(content_type: str, body: bytes) -> Response:
    media_type = content_type.partition(";")[0].strip().lower()
    if media_type != FORM_TYPE:
        return _page(
            415,
            "Contact",
            "Contact",
            f'<p class="error">Send the form as {FORM_TYPE} (the browser does this when '
            'you press Send on the <a href="/contact/">contact page</a>).</p>',
            section="/contact/",
        )
    try:
        fields = parse_qs(
            body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=FORM_MAX_FIELDS
        )
    except ValueError:
        return _bad_request(f"The form has more than {FORM_MAX_FIELDS} fields.")
    raw = {key: fields.get(key, [""])[0] for key in ("name", "email", "topic", "message")}
    name, email, topic, message = data.contact_fields(**raw)
    values = {"name": name, "email": email, "topic": topic, "message": message}
    errors = []
    if not name:
        errors.append("Please enter your name.")
    elif len(name) > data.NAME_MAX_CHARS:
        errors.append(f"Your name is too long: use at most {data.NAME_MAX_CHARS} characters.")
    if not email:
        errors.append("Please enter your email address.")
    elif len(email) > data.EMAIL_MAX_CHARS or not data.email_valid(email):
        errors.append(
            f"\u201c{email[:60]}\u201d is not an email address: write it like name@example.org."
        )
    if topic not in data.TOPICS:
        errors.append("Please choose a topic: General, Billing or Technical.")
        values["topic"] = ""
    if len(message) > data.MESSAGE_MAX_CHARS:
        errors.append(f"Your message is too long: use at most {data.MESSAGE_MAX_CHARS} characters.")
    if errors:
        return _page(400, "Contact", "Contact", _contact_form(values, errors), section="/contact/")
    reference = data.reference_number(name, email, topic, message)
    content = (
        "<p>We have received your message and will answer within two working days. "
        f'Your reference number is <strong class="reference">{reference}</strong>.</p>'
        f"<dl><dt>Name</dt><dd>{esc(name)}</dd><dt>Email</dt><dd>{esc(email)}</dd>"
        f"<dt>Topic</dt><dd>{esc(topic)}</dd>"
        f"<dt>Message</dt><dd>{esc(message) if message else '(no message)'}</dd>"
        f"<dt>Reference</dt><dd>{reference}</dd></dl>"
        '<p><a href="/contact/">Send another message</a></p>'
    )
    return _page(200, "Message sent", f"Thank you, {name}", content, section="/contact/")


DOWNLOADS = {
    "/downloads/opening-hours.csv": (
        "Opening hours of public places",
        "CSV",
        "text/csv; charset=utf-8",
        True,  # an attachment: the browser saves it
        data.opening_hours_csv,
    ),
    "/downloads/bin-collection.txt": (
        "Household bin collection days",
        "plain text",
        "text/plain; charset=utf-8",
        False,  # shown in the browser
        data.bin_collection_txt,
    ),
}


def downloads() -> Response:
    items = "".join(
        f'<li><a href="{path}">{esc(label)}</a> ({kind}, {len(render().encode())} bytes)</li>'
        for path, (label, kind, _type, _attachment, render) in DOWNLOADS.items()
    )
    content = f"<p>Files published by the town office.</p><ul>{items}</ul>"
    return _page(200, "Downloads", "Downloads", content, section="/downloads/")


def download(path: str) -> Response:
    _label, _kind, content_type, attachment, render = DOWNLOADS[path]
    filename = path.rsplit("/", 1)[1]
    disposition = "attachment" if attachment else "inline"
    return Response(
        200,
        render().encode(),
        content_type,
        (("Content-Disposition", f'{disposition}; filename="{filename}"'),),
    )


ARTICLES_BY_PATH = {a.path: a for a in data.ARTICLES}
SECTIONS = {"/news", "/directory", "/contact", "/downloads"}


def respond(method: str, target: str, *, content_type: str = "", body: bytes = b"") -> Response:
    """The response to ``method`` on ``target`` (origin form, or absolute: only the path
    and query count; the host never does). ``body`` is the request body, already read
    and bounded by the server."""
    try:
        parts = urlsplit(target)
        query = parse_qs(parts.query, keep_blank_values=True, max_num_fields=FORM_MAX_FIELDS)
    except ValueError:
        return _bad_request("The address of this request cannot be read.")
    path = parts.path or "/"
    allowed = ALLOWED_CONTACT if path == "/contact/" else ALLOWED
    known = (
        path in ("/", "/news/", "/directory/", "/contact/", "/downloads/")
        or path in ARTICLES_BY_PATH
        or path in DOWNLOADS
    )
    if known and method not in allowed:
        return _method_not_allowed(allowed)
    if method not in ALLOWED_CONTACT:
        return _method_not_allowed(ALLOWED)
    if path == "/":
        return home()
    if path == "/news/":
        return news_list()
    if path in ARTICLES_BY_PATH:
        return article(ARTICLES_BY_PATH[path])
    if path == "/directory/":
        return directory(query.get("q"))
    if path == "/contact/":
        return contact_submit(content_type, body) if method == "POST" else contact_form()
    if path == "/downloads/":
        return downloads()
    if path in DOWNLOADS:
        return download(path)
    if method in ALLOWED and (path in SECTIONS or f"{path}/" in ARTICLES_BY_PATH):
        return _redirect(f"{path}/" + (f"?{parts.query}" if parts.query else ""))
    return _not_found(path)
