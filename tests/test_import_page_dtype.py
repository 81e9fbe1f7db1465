"""An imported float32 model's explorer page carries its weights as float32 (half the bytes),
exactly: they widen back bit for bit to the run's float64 weights. Anything that does not fit
float32 exactly travels as float64."""

import numpy as np
import torch

from flatformer.explorer.export import export_run, flat_weights, weights_of
from flatformer.importers.run import read_source, write_run
from flatformer.store.checkpoints import checkpoint_bytes
from flatformer.store.runs import load_run
from flatformer.store.layout import checkpoint_path
from flatformer.store.write import atomic_write
from test_import_nanogpt import make


def imported_run(tmp_path, dtype):
    gpt, args = make(True, dtype)
    torch.save({"model_args": args, "model": gpt.state_dict()}, tmp_path / "ckpt.pt")
    return load_run(write_run(*read_source(tmp_path / "ckpt.pt", None, None), tmp_path / "run"))


def run_weights(run):
    return np.concatenate([flat_weights(run.cfg, run.weights(s)) for s in run.steps])


def test_a_float32_import_travels_as_float32_and_widens_bit_for_bit(tmp_path):
    run = imported_run(tmp_path, torch.float32)
    assert run.config["imported"]["dtype"] == "float32"
    data = export_run(run)
    assert data["weights_dtype"] == "float32"
    expected = run_weights(run)
    got = weights_of(data)
    assert got.dtype == np.float64
    assert got.tobytes() == expected.tobytes()  # bit for bit, signs of zeros included
    assert len(data["weights"]) < 0.55 * len(expected) * 8 * 4 / 3  # base64 of 4 bytes each


def test_a_float64_import_travels_as_float64(tmp_path):
    run = imported_run(tmp_path, torch.float64)
    assert run.config["imported"]["dtype"] == "float64"
    data = export_run(run)
    assert data["weights_dtype"] == "float64"
    assert weights_of(data).tobytes() == run_weights(run).tobytes()


def test_a_float32_import_changed_past_float32_falls_back_to_float64(tmp_path):
    """Say it was fine-tuned in float64 afterwards: one nudge of one ulp is enough."""
    run = imported_run(tmp_path, torch.float32)
    tensors = run.weights(0)
    tensors["blocks.1.mlp.W_out"][3, 5] = np.nextafter(tensors["blocks.1.mlp.W_out"][3, 5], 1)
    atomic_write(checkpoint_path(run.path, 0), checkpoint_bytes(tensors))
    run = load_run(run.path)
    assert run.config["imported"]["dtype"] == "float32"
    data = export_run(run)
    assert data["weights_dtype"] == "float64"
    assert weights_of(data).tobytes() == run_weights(run).tobytes()
