"""InterpBench case folders (ll_model.pth, ll_model_cfg.pkl, meta.json, edges.pkl), written in
that layout here: the model equals TransformerLens's own forward, its attention both ways as
tracr's models attend, and the ground-truth edges become the run's known circuit."""

import json
import os
import pickle

import numpy as np
import pytest
import torch
from clitools import assert_one_line_error, cli_here
from test_import_tl import legacy_state, tl_model

from flatformer.importers.interpbench import circuit_edges
from flatformer.store.runs import load_run

# A config as InterpBench's make_ll_cfg writes one: tracr's, widened, with gelu and both-way
# attention, its dtype a torch dtype and fields for TransformerLens's hooks.
CASE = dict(
    n_layers=2, n_heads=4, d_model=16, d_head=4, d_mlp=64, act_fn="gelu", d_vocab=7,
    d_vocab_out=5, n_ctx=6, normalization_type=None, attention_dir="bidirectional",
    use_attn_result=True, use_split_qkv_input=True, seed=0, device="cpu",
)  # fmt: skip
EDGES = [
    ("blocks.1.attn.hook_result[2]", "blocks.1.hook_resid_post"),
    ("blocks.0.hook_mlp_out", "blocks.1.hook_q_input[2]"),
    ("blocks.0.hook_mlp_out", "blocks.1.hook_v_input[2]"),
    ("hook_embed", "blocks.0.hook_mlp_in"),
    ("hook_pos_embed", "blocks.1.hook_k_input[2]"),
    ("blocks.1.hook_q_input[2]", "blocks.1.attn.hook_q[2]"),
]


class Config:
    """Stands in for HookedTransformerConfig when pickling: renamed in the bytes below."""


def config_object_pickle(c: dict) -> bytes:
    obj = Config()
    obj.__dict__.update(c, dtype=torch.float32)
    data = pickle.dumps(obj, protocol=2)
    ours = f"c{Config.__module__}\nConfig\n".encode()
    assert ours in data
    return data.replace(
        ours, b"ctransformer_lens.HookedTransformerConfig\nHookedTransformerConfig\n"
    )


def write_case(folder, as_object=False, edges=EDGES):
    folder.mkdir()
    state = legacy_state(CASE, torch.float64)
    torch.save(state, folder / "ll_model.pth")
    cfg = config_object_pickle(CASE) if as_object else pickle.dumps(dict(CASE, dtype=torch.float32))
    (folder / "ll_model_cfg.pkl").write_bytes(cfg)
    (folder / "meta.json").write_text(json.dumps({"epochs": 500, "lr": 0.001}))
    (folder / "edges.pkl").write_bytes(pickle.dumps(edges))
    return state


@pytest.mark.parametrize("as_object", [False, True], ids=["dict", "config-object"])
def test_a_case_imports_equal_to_transformer_lens_with_its_circuit(tmp_path, as_object):
    state = write_case(tmp_path / "case", as_object)
    made = cli_here("import", tmp_path / "case", "--out", tmp_path / "run")
    assert made.returncode == 0, made.stderr
    assert "interpbench model" in made.stdout and "known circuit: 5 edges" in made.stdout
    run = load_run(tmp_path / "run")
    assert run.cfg.causal is False
    tokens = np.random.default_rng(0).integers(0, CASE["d_vocab"], (5, CASE["n_ctx"]))
    with torch.no_grad():
        expected = tl_model(CASE, state, torch.float64)(torch.tensor(tokens)).numpy()
    np.testing.assert_allclose(run.model()(tokens), expected, atol=1e-9, rtol=0)
    imported = run.config["imported"]
    assert imported["training"] == {"epochs": 500, "lr": 0.001}
    assert imported["circuit"]["edges"] == [
        ["a1.2", "logits"],
        ["m0", "a1.2.q"],
        ["m0", "a1.2.v"],
        ["pos", "a1.2.k"],
        ["tok", "m0"],
    ]


def test_edge_names_map_to_the_graphs_and_refuse_what_it_lacks():
    assert circuit_edges([("blocks.0.hook_resid_pre", "blocks.0.hook_mlp_in")], 1, 2) == [
        ["pos", "m0"],
        ["tok", "m0"],
    ]
    with pytest.raises(Exception, match="outside the model"):
        circuit_edges([("blocks.0.attn.hook_result[5]", "blocks.0.hook_resid_post")], 1, 2)
    with pytest.raises(Exception, match="not a receiver"):
        circuit_edges([("hook_embed", "blocks.0.hook_resid_mid")], 1, 2)


class Payload:
    """Would run a shell command if unpickled (os.system: a name no library replaces, where
    print may be, as Ray's progress bars do)."""

    def __reduce__(self):
        return (os.system, ("echo ran",))


@pytest.mark.parametrize("target", ["ll_model_cfg.pkl", "edges.pkl"])
def test_a_pickle_that_names_a_function_is_refused_unrun(tmp_path, capsys, target):
    write_case(tmp_path / "case")
    (tmp_path / "case" / target).write_bytes(pickle.dumps(Payload()))
    result = cli_here("import", tmp_path / "case", "--out", tmp_path / "run")
    assert_one_line_error(result, target, "system")
    assert "ran" not in result.stdout and "ran" not in capsys.readouterr().out
    assert not (tmp_path / "run").exists()


def test_circuits_scores_the_methods_against_the_cases_circuit(tmp_path):
    write_case(tmp_path / "case")
    assert cli_here("import", tmp_path / "case", "--out", tmp_path / "run").returncode == 0
    rows = ["1 2 3 4 5", "2 2 3 1 5", "4 1 3 1 5", "0 6 2 1 3"]
    lines = [json.dumps({"prompt": p, "target": "2"}) for p in rows]
    (tmp_path / "ex.jsonl").write_text("\n".join(lines))
    args = ["circuits", tmp_path / "run", "--prompts", tmp_path / "ex.jsonl", "--ablation", "zero"]
    made = cli_here(*args, "--json")
    assert made.returncode == 0, made.stderr
    known = json.loads(made.stdout)["known_circuit"]
    assert known["edges"] == 5 and known["source"] == "InterpBench edges.pkl"
    assert set(known["methods"]) == {"exact", "eap", "eap_ig", "acdc"}
    assert all(0 <= m["recall"] <= 1 for m in known["methods"].values())
    assert "Methods against the known circuit" in cli_here(*args).stdout
    lines.append(json.dumps({"prompt": "1 2", "target": "2"}))
    (tmp_path / "ex.jsonl").write_text("\n".join(lines))
    assert_one_line_error(cli_here(*args), "attends to every position", "one length")
