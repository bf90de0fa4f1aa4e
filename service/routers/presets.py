"""GET /v1/presets: the preset names a request may use for model, cluster, training, GPU."""
from __future__ import annotations

from fastapi import APIRouter, Depends

from service.routers.common import require_token

router = APIRouter(prefix="/v1", tags=["presets"], dependencies=[Depends(require_token)])


@router.get("/presets", summary="Preset names by kind")
def presets() -> dict[str, list[str]]:
    """Names accepted in place of inline objects: models, clusters, training runs, GPUs."""
    from solver import presets as solver_presets
    from topology import catalog

    return {"models": solver_presets.preset_names("models"),
            "clusters": catalog.preset_names("clusters"),
            "training": solver_presets.preset_names("training"),
            "gpus": catalog.preset_names("gpus")}
