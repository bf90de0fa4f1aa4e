"""POST /v1/layouts: ranked layouts for a scheduler, each with launcher exports and placement."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from service.routers.common import require_token
from service.routers.dispatch import run_job
from service.routers.schemas import LayoutsOut, LayoutsIn, error_responses

router = APIRouter(prefix="/v1", tags=["layouts"], dependencies=[Depends(require_token)])


@router.post("/layouts", summary="Ranked layouts with Megatron-LM / torchtitan / DeepSpeed "
             "configs and rank placement",
             responses={200: {"model": LayoutsOut},
                        **error_responses(401, 413, 415, 422, 503, 504)})
async def post_layouts(body: LayoutsIn, request: Request) -> Response:
    """Parsing, search and exports run in a solve worker (service.jobs.layouts_job),
    which also encodes the JSON body."""
    body_bytes = await run_job(request, "layouts", body.model_dump(exclude_unset=True))
    return Response(body_bytes, media_type="application/json")  # JSON encoded by the worker
