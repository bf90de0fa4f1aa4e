"""POST /v1/estimate: accounting and predicted step time / memory for one fixed layout."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from service.routers.common import require_token
from service.routers.dispatch import run_job
from service.routers.schemas import EstimateOut, EstimateIn, error_responses

router = APIRouter(prefix="/v1", tags=["estimate"], dependencies=[Depends(require_token)])


@router.post("/estimate", summary="Estimate one layout (the JSON of `trainplan estimate`)",
             responses={200: {"model": EstimateOut},
                        **error_responses(401, 413, 415, 422, 503, 504)})
async def post_estimate(body: EstimateIn, request: Request) -> Response:
    """Parsing and the estimate run in a solve worker (service.jobs.estimate_job),
    which also encodes the JSON body."""
    body_bytes = await run_job(request, "estimate", body.model_dump(exclude_unset=True))
    return Response(body_bytes, media_type="application/json")  # JSON encoded by the worker
