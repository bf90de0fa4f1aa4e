"""POST /v1/estimate: accounting and predicted step time / memory for one fixed layout."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from service.routers import solving
from service.routers.common import app_settings, problem_specs, require_token
from service.routers.errors import jsonable
from service.routers.schemas import EstimateIn, error_responses
from service.settings import Settings

router = APIRouter(prefix="/v1", tags=["estimate"], dependencies=[Depends(require_token)])


@router.post("/estimate", summary="Estimate one layout (the JSON of `trainplan estimate`)",
             responses=error_responses(401, 413, 422, 503))
def post_estimate(body: EstimateIn, request: Request,
                  settings: Settings = Depends(app_settings)) -> JSONResponse:
    specs = problem_specs(settings, model=body.model, cluster=body.cluster,
                          training=body.training, layout=body.layout)
    model, cluster, training, layout = (specs[k] for k in ("model", "cluster", "training", "layout"))
    with request.app.state.slots.hold():
        result = solving.run_estimate(model, cluster, training, layout)
    return JSONResponse(jsonable(result))
