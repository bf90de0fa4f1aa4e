"""POST /v1/plans (solve and store), GET /v1/plans/{id}, GET /v1/plans/{id}/report (HTML)."""
from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from service.report_html import render_report
from starlette.concurrency import run_in_threadpool

from service.routers.common import app_store, require_token
from service.routers.dispatch import run_job
from service.routers.schemas import PlanIn, PlanOut, error_responses
from service.store import PlanStore, StoredPlan

router = APIRouter(prefix="/v1", tags=["plans"], dependencies=[Depends(require_token)])

PlanId = Path(min_length=1, max_length=64, description="The id POST /v1/plans returned.")
_ERRORS = error_responses(401, 404, 413, 415, 422, 503, 504)
# The report page has no scripts and no external assets; the browser is told so.
REPORT_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
                  "X-Content-Type-Options": "nosniff"}


def _body(stored: StoredPlan, limits: dict | None = None) -> dict:
    out = {**stored.plan, "id": stored.id, "created_at": stored.created_at.isoformat(),
           "links": {"self": f"/v1/plans/{stored.id}", "report": f"/v1/plans/{stored.id}/report"}}
    if limits is not None:
        out["limits"] = limits
    return out


@router.post("/plans", status_code=201, responses={201: {"model": PlanOut}, **_ERRORS},
             summary="Plan a run: the full plan of `trainplan plan` plus an id; stored")
async def create_plan(body: PlanIn, request: Request,
                      store: PlanStore = Depends(app_store)) -> JSONResponse:
    """The store is checked first (503 when it cannot take the plan), then the plan is made
    in a solve worker (service.jobs.plan_job) and stored."""
    await run_in_threadpool(store.check_writable)
    out = await run_job(request, "plans", body.model_dump(exclude_unset=True))
    stored = await run_in_threadpool(store.save, out["asked"], out["plan"], out["report"])
    return JSONResponse(_body(stored, out["limits"]), status_code=201,
                        headers={"Location": f"/v1/plans/{stored.id}"})


def _get(store: PlanStore, plan_id: str) -> StoredPlan:
    stored = store.get(plan_id)
    if stored is None:
        raise HTTPException(404, f"no plan with id '{plan_id}'")
    return stored


@router.get("/plans/{plan_id}", responses={200: {"model": PlanOut}, **_ERRORS},
            summary="A stored plan")
def get_plan(plan_id: str = PlanId, store: PlanStore = Depends(app_store)) -> JSONResponse:
    return JSONResponse(_body(_get(store, plan_id)))


@router.delete("/plans/{plan_id}", status_code=204, responses=_ERRORS,
               summary="Delete a stored plan (and its report)")
def delete_plan(plan_id: str = PlanId, store: PlanStore = Depends(app_store)) -> Response:
    if not store.delete(plan_id):
        raise HTTPException(404, f"no plan with id '{plan_id}'")
    return Response(status_code=204)


@router.get("/plans/{plan_id}/report", response_class=HTMLResponse, responses=_ERRORS,
            summary="A stored plan as an HTML page with SVG charts")
def get_report(plan_id: str = PlanId, store: PlanStore = Depends(app_store)) -> HTMLResponse:
    stored = _get(store, plan_id)
    return HTMLResponse(render_report(stored.plan, stored.report, stored.id), headers=REPORT_HEADERS)
