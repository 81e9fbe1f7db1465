import numpy as np
import pytest

try:
    import torch
    torch.set_num_threads(1)  # two threads on this 2-core machine made tiny steps 50x slower
except ImportError:
    torch = None

from flatformer.config import preset

CONFIGS = {
    "paper-2d": preset("paper-2d", 12),
    "simulator-16d": preset("simulator-16d", 28),
    "2-layer": preset("paper-2d-2layer", 12),
    "2-layer-ln-bias": preset("simulator-16d", 20, n_layers=2, qkv_bias=True, unembed_bias=True),
}


@pytest.fixture(params=list(CONFIGS))
def cfg(request):
    return CONFIGS[request.param]
