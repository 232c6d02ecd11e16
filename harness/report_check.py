"""The rendered report loads nothing from another host: no analytics, no CDN, no font.

``python -m harness.report_check reports/html`` prints one line per problem and exits 1
(2: no report there); ``scripts/rig`` runs it on every report it renders.

The rule, for the page (``index.html``) and everything it embeds or ships beside it:

1. **Markup** (the page, and every attachment a browser renders as markup: HTML, XHTML,
   SVG): no attribute of any element names an absolute URL (``http:``, ``https:``,
   ``ws:``, ``wss:`` or ``//host``) of a host other than localhost, whether it loads
   (``script src``, ``link href``, ``img src``, ``iframe src``) or waits for a click
   (``a href``); no ``meta`` refresh elsewhere (``xmlns`` attributes are namespace
   names, not addresses). Its ``style`` elements and attributes
   follow rule 2, its scripts rule 3.
2. **Stylesheets**: no ``url(...)`` or ``@import`` of such a URL.
3. **Scripts** (inline, ``data:`` and files beside the page): every such URL in the code
   is one of ``SCRIPT_URLS``, each listed with why no browser requests it (an XML
   namespace is a name, not an address; a base for parsing a URL), or why it is only
   followed on a reader's click or for an attachment the rig never writes; and the code
   names no analytics at all (``ANALYTICS``). A URL the generator adds in a new version
   fails the check until someone has looked at it.
4. **Data** is not code: the report's results and text attachments (the page carries
   them as base64 strings in ``d(name, value)`` calls) may hold any URL (a JSON Schema's
   ``$id`` in a request is content the reader sees, never fetched). Only attachments a
   browser renders as markup (rule 1) are checked, and no Playwright trace may be
   attached (the report would open Playwright's online viewer to show it).

``tests/rig/test_report_offline.py`` renders a small report through the rig's own
configuration and checks it, and shows the check failing on the generator's default
(which embeds Google Analytics).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
SCHEMES = ("http", "https", "ws", "wss")

SCRIPT_URL = re.compile(
    r"""(?:https?|wss?)://[^\s"'`<>()\\,;]+|(?<=["'`])//[\w-]+(?:\.[\w-]+)+[^\s"'`<>()\\,;]*""",
    re.IGNORECASE,
)
"""A URL in code: with its scheme anywhere, or protocol-relative (``//host.tld``) at
the start of a string."""

CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""", re.IGNORECASE)

ANALYTICS = ("googletagmanager", "google-analytics", "gtag(", "analytics.js", "dataLayer.push")

SCRIPT_URLS = {
    "http://www.w3.org/": "XML namespace names (svg, xhtml, xlink, xml, xmlns, rdf): never fetched",
    "http://purl.org/dc/": "RDF names in an inline SVG icon's metadata (a data: URL)",
    "http://creativecommons.org/ns": "an RDF namespace name in the same SVG icon",
    "http://sodipodi.sourceforge.net/DTD/": "an XML namespace name in the same SVG icon",
    "http://www.inkscape.org/": "the same SVG icon's comment and namespace name",
    "https://allure.local": "a base for new URL(value, base) to read a link's scheme",
    "https://${": "a link made from a www. address in the report's text; a click follows it",
    "https://github.com/highlightjs/": "text of the highlighter's console warnings",
    "https://trace.playwright.dev": (
        "Playwright's trace viewer, opened only to show a Playwright trace attachment "
        "(the check fails a report holding one)"
    ),
}
"""Every absolute URL the report generator's scripts may name, with why it loads nothing
(checked against Allure 3.18.0's allure2 report)."""

MARKUP_ATTACHMENTS = (".html", ".htm", ".xhtml", ".svg")
PLAYWRIGHT_TRACE = "application/vnd.allure.playwright-trace"
DATA_CALL = re.compile(r'd\(("(?:[^"\\]|\\.)*"),\s*("(?:[^"\\]|\\.)*")\)')


def external(url: str) -> bool:
    """``url`` is an absolute http(s) or ws(s) URL, or a protocol-relative one, of a host
    other than localhost."""
    url = url.strip()
    try:
        parts = urlsplit(f"https:{url}" if url.startswith("//") else url)
        host = parts.hostname or ""
    except ValueError:
        return True  # not even parseable: a browser may still try it
    return parts.scheme.lower() in SCHEMES and host not in LOCAL_HOSTS


def css_problems(css: str, where: str) -> list[str]:
    urls = (m.group(1) or m.group(2) for m in CSS_URL.finditer(css))
    return [f"{where}: stylesheet loads {url}" for url in urls if external(url)]


def script_problems(code: str, where: str) -> list[str]:
    found = [f"{where}: script names analytics ({a})" for a in ANALYTICS if a in code]
    for match in SCRIPT_URL.finditer(code):
        url = match.group(0)
        if external(url) and not url.startswith(tuple(SCRIPT_URLS)):
            found.append(f"{where}: script names {url} (not in harness.report_check.SCRIPT_URLS)")
    return found


def _decoded(data_url: str) -> str | None:
    """The text of a base64 ``data:`` URL (None: not one)."""
    head, _, body = data_url.partition(",")
    if not head.startswith("data:") or not head.endswith(";base64"):
        return None
    return base64.b64decode(body).decode("utf-8", "replace")


class _Markup(HTMLParser):
    """Collects a page's problems (rule 1), its scripts and its stylesheets."""

    def __init__(self, where: str) -> None:
        super().__init__(convert_charrefs=True)
        self.where = where
        self.problems: list[str] = []
        self.scripts: list[tuple[str, str]] = []  # (where, code)
        self.sources: list[str] = []  # script src / stylesheet href relative to the page
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        place = f"{self.where} <{tag}"
        for name, value in values.items():
            if name == "xmlns" or name.startswith("xmlns:"):
                continue  # a namespace's name, never an address a browser requests
            if name == "style":
                self.problems += css_problems(value, f"{place} style>")
            elif name.startswith("on"):
                self.problems += script_problems(value, f"{place} {name}>")
            elif name == "srcset":
                urls = [c.split()[0] for c in value.split(",") if c.strip()]
                self.problems += [f"{place} srcset> names {u}" for u in urls if external(u)]
            elif external(value):
                self.problems.append(f"{place} {name}> names {value}")
        if tag == "meta" and values.get("http-equiv", "").lower() == "refresh":
            target = values.get("content", "").partition("url=")[2]
            if external(target):
                self.problems.append(f"{place} refresh> goes to {target}")
        src = values.get("src") if tag == "script" else None
        if tag == "link" and "stylesheet" in values.get("rel", ""):
            src = values.get("href")
        if src:
            text = _decoded(src)
            if text is not None:
                check = script_problems if tag == "script" else css_problems
                self.problems += check(text, f"{place}> data:")
            elif not external(src) and not src.startswith("data:"):
                self.sources.append(src)
        self._in = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "script":
            self.scripts.append((f"{self.where} <script>", data))
        elif self._in == "style":
            self.problems += css_problems(data, f"{self.where} <style>")


def markup_problems(text: str, where: str, directory: Path | None = None) -> list[str]:
    """Rules 1-4 on a page or a markup attachment (``directory``: where the files it
    names are; None: it names none)."""
    parser = _Markup(where)
    parser.feed(text)
    parser.close()
    found = list(parser.problems)
    for place, code in parser.scripts:
        found += script_problems(DATA_CALL.sub("", code), place)
        for call in DATA_CALL.finditer(code):
            found += _data_problems(call, where)
    for source in parser.sources:
        path = (directory or Path("/nonexistent")) / source.split("?", 1)[0].split("#", 1)[0]
        if directory is not None and path.is_file():
            body = path.read_text("utf-8", "replace")
            check = script_problems if path.suffix in (".js", ".mjs") else css_problems
            found += check(body, f"{where} -> {source}")
    return found


def _data_problems(call: re.Match[str], where: str) -> list[str]:
    """Rule 4: a ``d(name, base64)`` call's payload."""
    name, value = json.loads(call.group(1)), json.loads(call.group(2))
    try:
        text = base64.b64decode(value, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        text = value
    found = []
    if PLAYWRIGHT_TRACE in text:
        found.append(f"{where}: {name} holds a Playwright trace (its viewer is online)")
    if name.lower().endswith(MARKUP_ATTACHMENTS):
        found += markup_problems(text, f"{where} attachment {name}")
    return found


def problems(report: Path) -> list[str]:
    """Everything in the report at ``report`` (a directory with index.html) that would
    load from another host (the rule above); empty: nothing."""
    page = report / "index.html"
    found = markup_problems(page.read_text("utf-8"), "index.html", report)
    for path in sorted(report.rglob("*")):
        rel = path.relative_to(report).as_posix()
        if path.suffix.lower() in MARKUP_ATTACHMENTS and path != page:
            found += markup_problems(path.read_text("utf-8", "replace"), rel, path.parent)
        elif path.suffix.lower() in (".js", ".mjs"):
            found += script_problems(path.read_text("utf-8", "replace"), rel)
        elif path.suffix.lower() == ".css":
            found += css_problems(path.read_text("utf-8", "replace"), rel)
    return sorted(set(found))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m harness.report_check REPORT_DIR", file=sys.stderr)
        return 2
    report = Path(argv[0])
    if not (report / "index.html").is_file():
        print(f"{report / 'index.html'}: no rendered report there", file=sys.stderr)
        return 2
    found = problems(report)
    for line in found:
        print(line)
    print(f"{report}: {'loads from another host' if found else 'loads nothing from another host'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
