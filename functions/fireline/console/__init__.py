"""The operator console: static assets shipped in the package, served at /console by the
API itself (no CDN, nothing fetched at run time). The page talks to the JSON API with the
key the operator signs in with, kept in the browser's sessionStorage."""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass

# Asset names are flat and plain: a request names one of them or is refused, so no path
# from the URL ever reaches the file system.
ASSET_NAME = re.compile(r"^[a-z0-9-]+\.(html|js|css|svg)$")
TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}
# Scripts and styles from this origin only, no inline script, no framing: what the page
# shows comes from the API as text, never as markup.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
INDEX = "index.html"
# Served at /favicon.ico too, where browsers look for it (an SVG: the page links it as one).
FAVICON = "favicon.svg"


@dataclass(frozen=True)
class Asset:
    body: str
    content_type: str


def asset(name: str) -> Asset | None:
    """The packaged asset ``name``, or None for any name that is not one."""
    if not ASSET_NAME.match(name):
        return None
    found = importlib.resources.files(__package__).joinpath("static", name)
    if not found.is_file():
        return None
    return Asset(found.read_text(encoding="utf-8"), TYPES[name.rsplit(".", 1)[1]])
