"""Imported sources as hostile input: safetensors headers that lie, weights that are not finite
floats, configs whose sizes are not whole numbers in train's ranges, state dicts that are not
mappings of names to tensors. Each is one line naming the field or tensor, never a traceback;
the validator of headers and of sizes is fuzzed."""

import json
import math

import numpy as np
import pytest
import torch
from clitools import assert_one_line_error, cli_here
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_import_nanogpt import make

from flatformer.errors import FlatformerError
from flatformer.importers import validate
from test_import_tl import GROKKING, legacy_state

FUZZ = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


def safetensors_bytes(header: dict, body: bytes, length: int | None = None) -> bytes:
    """A safetensors file written byte by byte: its length field (true unless `length`), the
    header as given, the data."""
    text = json.dumps(header).encode()
    return (len(text) if length is None else length).to_bytes(8, "little") + text + body


def honest(state: dict) -> tuple[dict, bytes]:
    """The header and data that describe `state` (NumPy float64 arrays) truly."""
    header, body = {}, b""
    for name, array in state.items():
        raw = np.ascontiguousarray(array, "<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(array.shape),
                        "data_offsets": [len(body), len(body) + len(raw)]}  # fmt: skip
        body += raw
    return header, body


@pytest.fixture(scope="module")
def grokking():
    return {k: v.numpy() for k, v in legacy_state(GROKKING, torch.float64).items()
            if v.dtype == torch.float64 and v.ndim}  # fmt: skip


def import_tl(tmp_path, data: bytes, config=GROKKING):
    (tmp_path / "model.safetensors").write_bytes(data)
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    return cli_here("import", tmp_path / "model.safetensors", "--config", tmp_path / "cfg.json",
                    "--out", tmp_path / "run")  # fmt: skip


def spoil(header: dict, name: str, **entry) -> dict:
    return {**header, name: {**header[name], **entry}}


def test_an_honest_hand_written_file_imports(tmp_path, grokking):
    result = import_tl(tmp_path, safetensors_bytes(*honest(grokking)))
    assert result.returncode == 0, result.stderr


LIES = {
    "offsets past the end": (
        lambda h, n: spoil(h, "embed.W_E", data_offsets=[0, n + 8]), ["embed.W_E", "outside"]),
    "overlapping tensors": (lambda h, n: spoil(h, "pos_embed.W_pos", data_offsets=[8, 392]),
                            ["overlap"]),
    "dtype that does not match its bytes": (
        lambda h, n: spoil(h, "embed.W_E", dtype="F32"), ["embed.W_E", "F32", "needs"]),
    "unknown dtype": (lambda h, n: spoil(h, "embed.W_E", dtype="Q7"), ["unknown dtype", "Q7"]),
    "a 2.4 GB member": (
        lambda h, n: spoil(h, "embed.W_E", shape=[300_000, 1000]), ["embed.W_E", "2,400,000,000"]),
    "shape of strings": (lambda h, n: spoil(h, "embed.W_E", shape=["14", 16]), ["shape"]),
    "header a list": (lambda h, n: [1, 2], ["not an object"]),
}  # fmt: skip


@pytest.mark.parametrize("lie", LIES, ids=list(LIES))
def test_a_lying_safetensors_header_is_one_line(tmp_path, grokking, lie):
    header, body = honest(grokking)
    spoiled, words = LIES[lie]
    result = import_tl(tmp_path, safetensors_bytes(spoiled(header, len(body)), body))
    assert_one_line_error(result, *words)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("length", [2**60, 2**64 - 1, 0, 10**6 + 1])
def test_a_header_length_no_file_has_is_one_line(tmp_path, grokking, length):
    header, body = honest(grokking)
    result = import_tl(tmp_path, safetensors_bytes(header, body, length))
    assert_one_line_error(result, "header length")


def test_a_bfloat16_tensor_imports_equal_to_its_float32_value(tmp_path, grokking):
    header, body = honest(grokking)
    exact = {k: v.astype(np.float32) for k, v in grokking.items()}
    exact["embed.W_E"] = torch.tensor(exact["embed.W_E"]).bfloat16().float().numpy()
    bf16 = torch.tensor(exact["embed.W_E"]).bfloat16().view(torch.int16).numpy().tobytes()
    header, body = {}, b""
    for name, array in exact.items():
        raw = bf16 if name == "embed.W_E" else array.tobytes()
        dtype = "BF16" if name == "embed.W_E" else "F32"
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [len(body), len(body) + len(raw)]}  # fmt: skip
        body += raw
    (tmp_path / "m.safetensors").write_bytes(safetensors_bytes(header, body))
    state = validate.read_safetensors(tmp_path / "m.safetensors")
    assert state["embed.W_E"].dtype == np.float32
    assert np.array_equal(state["embed.W_E"], exact["embed.W_E"])
    assert import_tl(tmp_path, safetensors_bytes(header, body)).returncode == 0


def test_a_bfloat16_pt_state_dict_imports(tmp_path):
    state = {k: v.bfloat16() if v.is_floating_point() else v
             for k, v in legacy_state(GROKKING, torch.float32).items()}  # fmt: skip
    torch.save(state, tmp_path / "m.pt")
    (tmp_path / "cfg.json").write_text(json.dumps(GROKKING))
    result = cli_here("import", tmp_path / "m.pt", "--config", tmp_path / "cfg.json",
                      "--out", tmp_path / "run")  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "value, words",
    [(float("nan"), ["embed.W_E", "NaN"]), (float("inf"), ["embed.W_E", "infinite"])],
)
def test_a_weight_that_is_not_finite_is_refused_by_name(tmp_path, grokking, value, words):
    spoiled = dict(grokking, **{"embed.W_E": grokking["embed.W_E"].copy()})
    spoiled["embed.W_E"][3, 4] = value
    assert_one_line_error(import_tl(tmp_path, safetensors_bytes(*honest(spoiled))), *words)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int64])
def test_a_complex_or_integer_weight_is_refused_by_name(tmp_path, dtype):
    state = legacy_state(GROKKING, torch.float32)
    state["blocks.0.attn.W_Q"] = state["blocks.0.attn.W_Q"].to(dtype)
    torch.save(state, tmp_path / "m.pt")
    (tmp_path / "cfg.json").write_text(json.dumps(GROKKING))
    result = cli_here("import", tmp_path / "m.pt", "--config", tmp_path / "cfg.json",
                      "--out", tmp_path / "run")  # fmt: skip
    assert_one_line_error(result, "blocks.0.attn.W_Q", str(dtype).removeprefix("torch."))


TL_CONFIGS = [
    (dict(GROKKING, n_heads=0), ["n_heads", "1..64", "0"]),
    (dict(GROKKING, n_layers=10**7), ["n_layers", "1..48"]),
    (dict(GROKKING, d_model=10**400), ["d_model"]),
    (dict(GROKKING, d_head=0), ["d_head"]),
    (dict(GROKKING, normalization_type="LN", eps="1e-5"), ["eps", "'1e-5'"]),
]


@pytest.mark.parametrize("config, words", TL_CONFIGS, ids=lambda v: str(v)[-40:])
def test_a_tl_config_with_sizes_out_of_range_is_one_line(tmp_path, grokking, config, words):
    assert_one_line_error(import_tl(tmp_path, safetensors_bytes(*honest(grokking)), config), *words)


def test_a_json_number_of_1e400_is_one_line(tmp_path, grokking):
    text = json.dumps(GROKKING).replace('"n_ctx": 3', '"n_ctx": 1e400')
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes(*honest(grokking)))
    (tmp_path / "cfg.json").write_text(text)
    result = cli_here("import", tmp_path / "model.safetensors", "--config", tmp_path / "cfg.json",
                      "--out", tmp_path / "run")  # fmt: skip
    assert_one_line_error(result, "n_ctx", "inf")


def nanogpt_file(tmp_path, spoil_args=None, spoil_state=None):
    gpt, args = make(True, torch.float32)
    checkpoint = {"model_args": dict(args, **(spoil_args or {})), "model": gpt.state_dict()}
    if spoil_state:
        spoil_state(checkpoint)
    torch.save(checkpoint, tmp_path / "ckpt.pt")
    return cli_here("import", tmp_path / "ckpt.pt", "--out", tmp_path / "run")


def one_column(checkpoint):
    name = "transformer.h.0.attn.c_attn.weight"
    checkpoint["model"][name] = checkpoint["model"][name][:, :1].clone()


NANOGPT = {
    "model a list": (None, lambda c: c.update(model=[1, 2]), ["model", "not a state dict"]),
    "model of strings": (None, lambda c: c["model"].update(x="y"), ["'x'", "not a tensor"]),
    "zero heads": ({"n_head": 0}, None, ["n_head", "1..64"]),
    "n_layer 1e7": ({"n_layer": 1e7}, None, ["n_layer", "1..48"]),
    "n_embd infinite": ({"n_embd": math.inf}, None, ["n_embd", "inf"]),
    "n_embd a string": ({"n_embd": "16"}, None, ["n_embd", "'16'"]),
    "heads not dividing": ({"n_head": 3}, None, ["n_embd 16", "multiple of n_head 3"]),
    "one-column c_attn": (None, one_column, ["c_attn.weight", "(48, 1)", "(48, 16)"]),
    "bias a string": ({"bias": "no"}, None, ["bias", "true or false"]),
}  # fmt: skip


@pytest.mark.parametrize("case", NANOGPT, ids=list(NANOGPT))
def test_a_hostile_nanogpt_checkpoint_is_one_line(tmp_path, case):
    spoil_args, spoil_state, words = NANOGPT[case]
    assert_one_line_error(nanogpt_file(tmp_path, spoil_args, spoil_state), *words)


def test_a_nan_in_a_nanogpt_checkpoint_is_refused_by_name(tmp_path):
    def nan(checkpoint):
        checkpoint["model"]["transformer.ln_f.weight"][0] = float("nan")

    assert_one_line_error(nanogpt_file(tmp_path, None, nan), "transformer.ln_f.weight", "NaN")


@pytest.fixture
def hf_folder(tmp_path):
    from test_import_hf import gpt2

    gpt2(tmp_path / "m", True)
    return tmp_path / "m"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"n_head": 0}, ["config.json", "n_head", "1..64"]),
        ({"n_layer": 1e7}, ["config.json", "n_layer"]),
        ({"layer_norm_epsilon": "1e-5"}, ["layer_norm_epsilon", "'1e-5'"]),
        ({"n_positions": None}, ["config.json", "n_positions"]),
    ],
)
def test_a_gpt2_config_error_names_gpt2s_field(hf_folder, change, words):
    config = json.loads((hf_folder / "config.json").read_text())
    (hf_folder / "config.json").write_text(json.dumps({**config, **change}))
    result = cli_here("import", hf_folder, "--out", hf_folder.parent / "run")
    assert_one_line_error(result, *words)
    assert "nanoGPT" not in result.stderr


def test_a_gpt2_safetensors_member_past_the_end_is_one_line(hf_folder):
    data = (hf_folder / "model.safetensors").read_bytes()
    (hf_folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    result = cli_here("import", hf_folder, "--out", hf_folder.parent / "run")
    assert_one_line_error(result, "model.safetensors", "outside")


def test_a_refused_pickle_is_not_quoted_as_advice_to_load_it_unsafely(tmp_path):
    torch.save({"model_args": {}, "model": {}, "opt": Gadget()}, tmp_path / "ckpt.pt")
    result = cli_here("import", tmp_path / "ckpt.pt", "--out", tmp_path / "run")
    assert_one_line_error(result, "Gadget", "never done")
    assert "False" not in result.stderr and "Re-running" not in result.stderr


class Gadget:
    pass


# ---- fuzzing the validators: a value or FlatformerError, never another exception ----

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=3),
    max_leaves=8,
)  # fmt: skip
entries = (
    st.fixed_dictionaries(
        {
            "dtype": st.sampled_from([*validate.ST_DTYPES, "X", 3]),
            "shape": st.lists(st.integers(-2, 2**40) | json_values, max_size=4),
            "data_offsets": st.lists(st.integers(-5, 2**40), min_size=0, max_size=3),
        }
    )
    | json_values
)
headers = st.builds(
    lambda header, body, length: safetensors_bytes(header, body, length),
    st.dictionaries(st.text(max_size=10), entries, max_size=4),
    st.binary(max_size=120),
    st.none() | st.integers(0, 2**64 - 1),
)


@FUZZ
@given(headers | st.binary(max_size=200))
def test_fuzzed_safetensors_headers_end_in_tensors_or_one_line(tmp_path_factory, data):
    path = tmp_path_factory.getbasetemp() / "fuzz.safetensors"
    path.write_bytes(data)
    try:
        state = validate.read_safetensors(path)
    except FlatformerError:
        return
    for name, tensor in state.items():
        assert isinstance(name, str) and isinstance(tensor, np.ndarray)


SIZE_FIELDS = {"d_model": "n_embd", "n_heads": "n_head", "n_layers": "n_layer"}


@FUZZ
@given(st.dictionaries(st.sampled_from([*SIZE_FIELDS.values(), "x"]), json_values))
def test_fuzzed_config_sizes_end_in_whole_numbers_in_range_or_one_line(config):
    try:
        sizes = validate.sizes(config, SIZE_FIELDS, "config")
    except FlatformerError:
        return
    for name, value in sizes.items():
        assert type(value) is int and validate.LIMITS[name][0] <= value <= validate.LIMITS[name][1]


@pytest.mark.parametrize("vocab", [False, True], ids=["ids", "chars"])
def test_a_corpus_linked_to_another_file_is_not_quoted_in_the_error(tmp_path, vocab):
    from test_import_nanogpt import write_source

    write_source(tmp_path)
    (tmp_path / "secret").write_text("hunter2:x:0:0 private\n")
    (tmp_path / "text.txt").symlink_to(tmp_path / "secret")
    meta = ["--vocab", tmp_path / "meta.pkl"] if vocab else []
    result = cli_here("import", tmp_path / "ckpt.pt", *meta, "--corpus", tmp_path / "text.txt",
                      "--out", tmp_path / "run")  # fmt: skip
    assert_one_line_error(result, "held-out text", "outside the model's vocabulary")
    assert "hunter2" not in result.stderr and "'h'" not in result.stderr
