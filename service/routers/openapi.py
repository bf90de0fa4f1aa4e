"""The OpenAPI document and the docs pages.

Request bodies keep `Any` spec fields in service.routers.schemas (each is validated by its
own strict spec so error paths read `model.layers`); here the document is given the real
types: the same pydantic models (solver.specs, topology.spec, solver.search.options) as
components, preset names as enums, the cluster's `gpu` as a GPU preset or a GpuSpec. The
bearer scheme is declared only when the server has a token. /docs (Swagger UI) and /redoc
serve their assets from this server (the fastapi-offline package ships them), no CDN.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import TypeAdapter

REF = "#/components/schemas/{model}"
ASSETS = "/docs-assets"


def _assets_dir() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).resolve().parent / "static"


def _component(schemas: dict[str, Any], name: str, cls: Any) -> dict[str, str]:
    """Put `cls`'s JSON schema (and its $defs) into components; returns a $ref to it."""
    schema = TypeAdapter(cls).json_schema(ref_template=REF, mode="validation")
    schemas.update(schema.pop("$defs", {}))
    schemas[name] = schema
    return {"$ref": REF.format(model=name)}


def _preset(kind: str, names: list[str]) -> dict[str, Any]:
    return {"type": "string", "enum": names, "title": f"{kind} preset",
            "description": f"a {kind} preset name (GET /v1/presets)"}


def _spec_types(schemas: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The typed schema of each request spec field (model, cluster, training, layout, options)."""
    from solver.presets import preset_names
    from solver.search.options import SearchOptions
    from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
    from topology import catalog
    from topology.spec import ClusterSpec

    model = _component(schemas, "ModelSpec", ModelSpec)
    cluster = _component(schemas, "ClusterSpec", ClusterSpec)
    gpu = schemas["ClusterSpec"]["properties"]["gpu"]
    schemas["ClusterSpec"]["properties"]["gpu"] = {
        "anyOf": [_preset("GPU", catalog.preset_names("gpus")), {"$ref": gpu["$ref"]}],
        "description": gpu.get("description", "")}
    count = {"type": "integer", "minimum": 1}
    hf = {"type": "object", "title": "Hugging Face config.json", "additionalProperties": True,
          "required": ["hidden_size", "num_hidden_layers", "num_attention_heads"],
          "properties": {"hidden_size": count, "num_hidden_layers": count,
                         "num_attention_heads": count},
          "description": "a Hugging Face config.json (Llama-style keys)"}
    return {
        "model": {"anyOf": [_preset("model", preset_names("models")), model, hf]},
        "cluster": {"anyOf": [_preset("cluster", catalog.preset_names("clusters")), cluster]},
        "training": {"anyOf": [_preset("training", preset_names("training")),
                               _component(schemas, "TrainingSpec", TrainingSpec)]},
        "layout": _component(schemas, "LayoutSpec", LayoutSpec),
        "options": {"anyOf": [_component(schemas, "SearchOptions", SearchOptions),
                              {"type": "null"}]},
    }


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document with typed spec fields; security only when a token is set."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    types = _spec_types(schemas)
    for body in ("PlanIn", "LayoutsIn", "EstimateIn"):
        props = schemas.get(body, {}).get("properties", {})
        for field in list(props):
            if field in types:
                props[field] = {**types[field], "description": props[field].get("description", "")}
    for path in doc["paths"].values():  # errors are JSON also on the HTML report route
        for op in path.values():
            for code, response in op.get("responses", {}).items():
                content = response.get("content", {})
                if code[0] in "45" and "text/html" in content:
                    content["application/json"] = content.pop("text/html")
    if app.state.settings.api_token is None:
        doc["components"].pop("securitySchemes", None)
        for path in doc["paths"].values():
            for op in path.values():
                op.pop("security", None)
    return doc


def install_docs(app: FastAPI) -> None:
    """The typed /openapi.json, /docs and /redoc with local assets (create the app with
    docs_url=None, redoc_url=None)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.mount(ASSETS, StaticFiles(directory=_assets_dir()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css", swagger_favicon_url=f"{ASSETS}/favicon.png")

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} API",
                              redoc_js_url=f"{ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS}/favicon.png", with_google_fonts=False)
