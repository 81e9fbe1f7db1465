"""The page's erf (flatformer/explorer/model.js) against the C library's, in Node."""

import json
import math
import subprocess
from pathlib import Path

import numpy as np

MODEL_JS = Path(__file__).parents[1] / "flatformer" / "explorer" / "model.js"


def test_the_pages_erf_equals_math_erf_over_a_wide_grid_and_its_tails(tmp_path):
    x = np.concatenate(
        [
            np.linspace(-8, 8, 4001),
            np.geomspace(1e-300, 1e-2, 200),
            -np.geomspace(1e-300, 1e-2, 200),
            [0.0, 2.999999, 3.0, 3.000001, 30.0],
        ]
    )
    (tmp_path / "x.json").write_text(json.dumps(x.tolist()))
    script = (
        f"const M = require({json.dumps(str(MODEL_JS))});"
        f"const x = require({json.dumps(str(tmp_path / 'x.json'))});"
        f"console.log(JSON.stringify(x.map(M.erf)));"
    )
    got = np.array(
        json.loads(
            subprocess.run(
                ["node", "-e", script], capture_output=True, text=True, check=True
            ).stdout
        )
    )
    expected = np.array([math.erf(v) for v in x])
    assert np.abs(got - expected).max() < 2e-16 * 8
    tiny = np.abs(x) < 1e-2
    assert np.all(np.abs(got[tiny] - expected[tiny]) <= 4e-16 * np.abs(expected[tiny]))
