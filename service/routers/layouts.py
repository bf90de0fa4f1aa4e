"""POST /v1/layouts: ranked layouts for a scheduler, each with launcher exports and placement."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from service.launchers import launchers, rank_placement
from service.routers import solving
from service.routers.common import app_settings, require_token, search_inputs
from service.routers.errors import jsonable
from service.routers.schemas import LayoutsIn, error_responses
from service.settings import Settings

router = APIRouter(prefix="/v1", tags=["layouts"], dependencies=[Depends(require_token)])


def _with_exports(entry: dict[str, Any], model, cluster, training) -> dict[str, Any]:
    from solver.specs import LayoutSpec

    # Every LayoutSpec field the entry carries: rank_order decides the placement and
    # Megatron's rank mapping, pipeline_layers an uneven split.
    layout = LayoutSpec.model_validate({k: entry[k] for k in LayoutSpec.model_fields if k in entry},
                                       strict=False)
    placement = rank_placement(cluster, layout)
    split = entry.get("pipeline_split")
    return {**entry, "launchers": launchers(model, training, layout, placement, split),
            "placement": placement}


@router.post("/layouts", summary="Ranked layouts with Megatron-LM / torchtitan / DeepSpeed "
             "configs and rank placement",
             responses=error_responses(401, 413, 422, 503))
def post_layouts(body: LayoutsIn, request: Request,
                 settings: Settings = Depends(app_settings)) -> JSONResponse:
    model, cluster, training, options, limits = search_inputs(body, settings)
    with request.app.state.slots.hold():
        result = solving.run_search(model, cluster, training, options)
        result["layouts"] = [_with_exports(e, model, cluster, training)
                             for e in result.get("layouts", [])]
    return JSONResponse(jsonable({**result, "limits": limits}))
