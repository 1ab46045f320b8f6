"""MkDocs hook: the API and CLI reference pages, generated at build time.

``reference/api.md`` is rendered from the OpenAPI document the API serves at
``/openapi.json`` (``fireline.api.app.openapi_document`` on the app the API function
builds), and ``reference/cli.md`` from the ``fireline`` command's own argparse parser
(``fireline.cli.main.build_parser``). Neither page exists in ``docs/``: each build writes
them from the code it documents, so they cannot drift from it.

The repository's ``functions/`` goes first on the import path, so the site documents the
checkout it is built from rather than whatever ``fireline`` is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "functions"))

API_PAGE = "reference/api.md"
CLI_PAGE = "reference/cli.md"
METHODS = ("get", "put", "post", "patch", "delete")
# Help is wrapped at this width whatever terminal builds the site, so a build is the same
# everywhere.
HELP_COLUMNS = "100"


# --- MkDocs events -------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, API_PAGE, content=api_page(openapi())))
    files.append(File.generated(config, CLI_PAGE, content=cli_page()))
    return files


# --- the API reference ---------------------------------------------------------------------


def openapi() -> dict[str, Any]:
    """The document ``GET /openapi.json`` answers: the deployed app's routes, every one of
    them (workflows, backfills, the console's overview and tenants included). The collaborators are
    not called while the document is built, only the routes they serve are declared."""
    from fireline.api import app

    served = app.build_app(
        service=_Unused(),  # type: ignore[arg-type]
        workflows=_Unused(),  # type: ignore[arg-type]
        overview=_Unused(),  # type: ignore[arg-type]
        tenants=list,
        backfills=_Unused(),  # type: ignore[arg-type]
    )
    document: dict[str, Any] = json.loads(app.openapi_document(served))
    return document


class _Unused:
    """A collaborator the document does not need: any use of it is a bug of this hook."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the API reference read {name} of a service it has not got")


def api_page(document: dict[str, Any]) -> str:
    info = document["info"]
    schemes = document.get("components", {}).get("securitySchemes", {})
    lines = [
        "# API reference",
        "",
        f"{info['title']} HTTP API, version {info['version']}. {info.get('description', '')}",
        "",
        "This page is generated when the site is built, from the OpenAPI document the API "
        "serves without a key at `GET /openapi.json` (rendered by Swagger UI at `GET /docs`). "
        "[The HTTP API](../api.md) says how the routes behave; this page lists what each "
        "takes and answers.",
        "",
    ]
    for name, scheme in schemes.items():
        where = f"the `{scheme.get('name')}` {scheme.get('in')}" if "name" in scheme else name
        lines += [f"Every operation is authenticated by {where} (`{name}`).", ""]
    lines += ["## Operations", ""]
    for group, operations in _grouped(document["paths"]):
        lines += [f"### {group}", ""]
        for path, method, operation in operations:
            lines += _operation(path, method, operation)
    lines += ["## Schemas", ""]
    for name, schema in sorted(document["components"]["schemas"].items()):
        lines += _schema(name, schema)
    return "\n".join(lines) + "\n"


def _grouped(
    paths: dict[str, Any],
) -> Iterator[tuple[str, list[tuple[str, str, dict[str, Any]]]]]:
    """Operations by their path's first segment: the groups in the document's order (the
    order the API declares its routes in), each group's paths sorted."""
    groups: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path in paths:
        groups.setdefault("/" + path.strip("/").split("/")[0], [])
    for path in sorted(paths):
        for method in METHODS:
            if method in paths[path]:
                group = "/" + path.strip("/").split("/")[0]
                groups.setdefault(group, []).append((path, method, paths[path][method]))
    yield from groups.items()


def _operation(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"#### `{method.upper()} {path}`", ""]
    if operation.get("summary"):
        lines += [_sentence(operation["summary"]), ""]
    if operation.get("description"):
        lines += [operation["description"].strip(), ""]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += [
            "| parameter | in | required | type | default | description |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for parameter in parameters:
            schema = parameter.get("schema", {})
            lines.append(
                _row(
                    f"`{parameter['name']}`",
                    parameter["in"],
                    "yes" if parameter.get("required") else "no",
                    _type(schema),
                    f"`{json.dumps(schema['default'])}`" if "default" in schema else "",
                    parameter.get("description") or schema.get("description", ""),
                )
            )
        lines.append("")
    body = operation.get("requestBody")
    if body:
        for content_type, content in body.get("content", {}).items():
            required = "required" if body.get("required") else "optional"
            shape = _type(content.get("schema", {}))
            lines += [
                f"**Request body** ({content_type}, {required}): {shape}",
                "",
            ]
            for example in content.get("examples", {}).values():
                lines += [
                    f"*{_sentence(example.get('summary', 'Example'))}*",
                    "",
                    "```json",
                    json.dumps(example.get("value"), indent=2),
                    "```",
                    "",
                ]
    lines += ["| status | meaning | body |", "| --- | --- | --- |"]
    for status, response in sorted(operation.get("responses", {}).items()):
        content = response.get("content", {})
        shapes = [_type(c.get("schema", {})) for c in content.values()]
        lines.append(_row(status, response.get("description", ""), ", ".join(shapes) or "none"))
    lines.append("")
    links = sorted(
        link
        for response in operation.get("responses", {}).values()
        for link in response.get("links", {})
    )
    if links:
        lines += [f"Links from the answer: {', '.join(f'`{name}`' for name in links)}.", ""]
    return lines


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{#{_anchor(name)}}}", ""]
    if schema.get("description"):
        lines += [schema["description"].strip(), ""]
    properties = schema.get("properties", {})
    if not properties:
        lines += [f"Type: {_type(schema)}.", ""]
        return lines
    required = set(schema.get("required", []))
    lines += [
        "| field | type | required | default | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for field, spec in properties.items():
        default = f"`{json.dumps(spec['default'])}`" if "default" in spec else ""
        lines.append(
            _row(
                f"`{field}`",
                _type(spec),
                "yes" if field in required else "no",
                default,
                spec.get("description", ""),
            )
        )
    lines.append("")
    if schema.get("additionalProperties") is False:
        lines += ["Other fields are refused.", ""]
    return lines


def _type(schema: dict[str, Any]) -> str:
    """A schema in words, with links to the named schemas it refers to."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    for combined in ("oneOf", "anyOf", "allOf"):
        if combined in schema:
            kinds = [_type(s) for s in schema[combined]]
            return (" and " if combined == "allOf" else " or ").join(kinds)
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type", "any")
    if kind == "array":
        shown = f"array of {_type(schema.get('items', {}))}"
    elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        shown = f"object of {_type(schema['additionalProperties'])}"
    else:
        shown = str(kind)
    if schema.get("format"):
        shown += f" ({schema['format']})"
    bounds = [
        f"{word} {_number(schema[key])}"
        for key, word in (
            ("minimum", ">="),
            ("exclusiveMinimum", ">"),
            ("maximum", "<="),
            ("exclusiveMaximum", "<"),
            ("minLength", "length >="),
            ("maxLength", "length <="),
            ("minItems", "items >="),
            ("maxItems", "items <="),
        )
        if key in schema
    ]
    if schema.get("pattern"):
        bounds.append(f"matching `{schema['pattern']}`")
    return shown + (f", {', '.join(bounds)}" if bounds else "")


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _anchor(schema_name: str) -> str:
    return f"schema-{schema_name.lower()}"


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!", ")")) else text + "."


def _row(*cells: str) -> str:
    def cell(text: str) -> str:
        return " ".join(str(text).split()).replace("|", "\\|")

    return "| " + " | ".join(cell(c) for c in cells) + " |"


# --- the CLI reference ---------------------------------------------------------------------


def cli_page() -> str:
    from fireline.cli import main

    lines = [
        "# CLI reference",
        "",
        "This page is generated when the site is built, from the `fireline` command's own "
        "parser: each section is what `--help` prints for that command. "
        "[The operator CLI](../cli.md) shows them at work; `.venv/bin/fireline` is the "
        "command in a clone (`fireline` in the activated `.venv`).",
        "",
    ]
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        for depth, command, parser in _commands(main.build_parser(), "fireline", 0):
            lines += [
                f"{'#' * min(depth + 2, 6)} `{command}`",
                "",
                "```text",
                parser.format_help().rstrip(),
                "```",
                "",
            ]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(lines) + "\n"


def _commands(
    parser: argparse.ArgumentParser, command: str, depth: int
) -> Iterator[tuple[int, str, argparse.ArgumentParser]]:
    """The parser and every parser under it, depth first, each once (an alias's parser
    is its command's)."""
    yield depth, command, parser
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from _commands(sub, f"{command} {name}", depth + 1)
