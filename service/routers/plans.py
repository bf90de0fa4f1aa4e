"""POST /v1/plans (solve and store), GET /v1/plans/{id}, GET /v1/plans/{id}/report (HTML)."""
from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import HTMLResponse, JSONResponse

from service.report_html import render_report
from service.routers import solving
from service.routers.common import (
    app_settings, app_store, require_token, search_inputs,
)
from service.routers.errors import jsonable
from service.routers.schemas import PlanIn, error_responses
from service.settings import Settings
from service.store import PlanStore, StoredPlan

router = APIRouter(prefix="/v1", tags=["plans"], dependencies=[Depends(require_token)])

PlanId = Path(min_length=1, max_length=64, description="The id POST /v1/plans returned.")
_ERRORS = error_responses(401, 404, 413, 422, 503)
# The report page has no scripts and no external assets; the browser is told so.
REPORT_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
                  "X-Content-Type-Options": "nosniff"}


def _body(stored: StoredPlan, limits: dict | None = None) -> dict:
    out = {**stored.plan, "id": stored.id, "created_at": stored.created_at.isoformat(),
           "links": {"self": f"/v1/plans/{stored.id}", "report": f"/v1/plans/{stored.id}/report"}}
    if limits is not None:
        out["limits"] = limits
    return out


@router.post("/plans", status_code=201, responses=_ERRORS,
             summary="Plan a run: the full plan of `trainplan plan` plus an id; stored")
def create_plan(body: PlanIn, request: Request, settings: Settings = Depends(app_settings),
                store: PlanStore = Depends(app_store)) -> JSONResponse:
    model, cluster, training, options, limits = search_inputs(body, settings)
    with request.app.state.slots.hold():
        plan = jsonable(solving.run_plan(model, cluster, training, options))
        report = jsonable(solving.report_data(plan, model, cluster))
    asked = {"model": model.model_dump(mode="json"), "cluster": cluster.model_dump(mode="json"),
             "training": training.model_dump(mode="json"), "options": options.model_dump(mode="json")}
    stored = store.save(asked, plan, report)
    return JSONResponse(_body(stored, limits), status_code=201,
                        headers={"Location": f"/v1/plans/{stored.id}"})


def _get(store: PlanStore, plan_id: str) -> StoredPlan:
    stored = store.get(plan_id)
    if stored is None:
        raise HTTPException(404, f"no plan with id '{plan_id}'")
    return stored


@router.get("/plans/{plan_id}", responses=_ERRORS, summary="A stored plan")
def get_plan(plan_id: str = PlanId, store: PlanStore = Depends(app_store)) -> JSONResponse:
    return JSONResponse(_body(_get(store, plan_id)))


@router.get("/plans/{plan_id}/report", response_class=HTMLResponse, responses=_ERRORS,
            summary="A stored plan as an HTML page with SVG charts")
def get_report(plan_id: str = PlanId, store: PlanStore = Depends(app_store)) -> HTMLResponse:
    stored = _get(store, plan_id)
    return HTMLResponse(render_report(stored.plan, stored.report, stored.id), headers=REPORT_HEADERS)
