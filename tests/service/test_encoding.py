"""service.jobs.encoded: the bytes of jsonable(value) as JSONResponse would send them, by one
json.dumps walk (falling back to jsonable's copy for non-finite floats and odd keys)."""
from __future__ import annotations

import json
import math

import numpy as np

from service.jobs import encoded
from service.routers.errors import jsonable
from solver.specs import LayoutSpec


def _reference(value) -> bytes:
    return json.dumps(jsonable(value), ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode("utf-8")


def test_encoded_equals_jsonable_bytes():
    layout = LayoutSpec(tp=2, dp=4)
    for value in (
        {"a": (1, 2.5, "é"), "b": [None, True], "n": np.int64(3), "f": np.float64(0.25),
         "s": {7}, "m": layout, 3: "int key"},                    # the one-walk path
        {"x": [1.0, math.nan, {"y": math.inf}], "z": np.float64("nan")},  # non-finite: null
        {(1, 2): "tuple key"},                                    # a key json.dumps cannot write
    ):
        assert encoded(value) == _reference(value)
    assert json.loads(encoded({"x": [math.nan]})) == {"x": [None]}
