"""`flatformer graph`: the graph JSON in the schema circuit-tracer writes for Neuronpedia's
viewer, transcoders trained when the run has none, and one-line refusals."""

import json

import pytest

from clitools import assert_one_line_error, cli_here
from flatformer.store.write import atomic_write

# circuit-tracer's frontend/graph_models.py: Node's fields, Metadata's, QParams'.
NODE_FIELDS = {
    "node_id",
    "feature",
    "layer",
    "ctx_idx",
    "feature_type",
    "token_prob",
    "is_target_logit",
    "run_idx",
    "reverse_ctx_idx",
    "jsNodeId",
    "clerp",
    "influence",
    "activation",
}
METADATA_FIELDS = {"slug", "scan", "transcoder_list", "prompt_tokens", "prompt", "node_threshold"}
QPARAMS_FIELDS = {"pinnedIds", "supernodes", "linkType", "clickedId", "sg_pos"}
TYPES = {"embedding", "cross layer transcoder", "mlp reconstruction error", "logit"}


def check_schema(doc):
    assert set(doc) == {"metadata", "qParams", "nodes", "links", "qk"}
    assert set(doc["metadata"]) == METADATA_FIELDS
    assert set(doc["qParams"]) == QPARAMS_FIELDS
    ids = [n["node_id"] for n in doc["nodes"]]
    assert len(ids) == len(set(ids))
    for n in doc["nodes"]:
        assert set(n) == NODE_FIELDS and n["feature_type"] in TYPES
    for link in doc["links"]:
        assert set(link) == {"source", "target", "weight"}
        assert link["source"] in ids and link["target"] in ids and link["weight"] != 0
    for group in doc["qParams"]["supernodes"]:
        assert group[0].startswith("block ") and len(group) >= 3 and set(group[1:]) <= set(ids)
    logits = [n for n in doc["nodes"] if n["feature_type"] == "logit"]
    assert sum(n["is_target_logit"] for n in logits) == 1
    assert logits[0]["is_target_logit"] and logits[0]["token_prob"] > 0
    T = len(doc["metadata"]["prompt_tokens"])
    embeds = [n for n in doc["nodes"] if n["feature_type"] == "embedding"]
    assert sorted(n["ctx_idx"] for n in embeds) == sorted(list(range(T)) * 2)
    # every feature kept reaches something, and is fed by something
    for n in doc["nodes"]:
        if n["feature_type"] == "cross layer transcoder":
            assert any(link["source"] == n["node_id"] for link in doc["links"])
            assert any(link["target"] == n["node_id"] for link in doc["links"])
            assert n["activation"] > 0


def test_graph_trains_transcoders_then_reuses_them(paper_run, tmp_path):
    result = cli_here("graph", paper_run, "--prompt", "5 6 5 3 8 9 2 +", "--out", tmp_path / "g")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())  # rich wraps lines at the terminal's width
    assert "training one per MLP" in said and "FVU" in said
    doc = json.loads((tmp_path / "g" / "graph.json").read_text())
    check_schema(doc)
    assert doc["metadata"]["prompt_tokens"] == "5 6 5 3 8 9 2 +".split()
    assert doc["qk"] and all(
        abs(sum(t["value"] for t in r["terms"]) + r["rest"] - r["score"]) < 1e-9 for r in doc["qk"]
    )
    listed = json.loads((tmp_path / "g" / "graph-metadata.json").read_text())
    assert [g["slug"] for g in listed["graphs"]] == ["graph"]

    prompts = tmp_path / "p.jsonl"
    atomic_write(
        prompts,
        b'{"prompt": "5 6 5 3 8 9 2 +", "target": "2"}\n{"prompt": "1 2 3 4 +", "target": "4"}\n',
    )
    result = cli_here(
        "graph",
        paper_run,
        "--prompts",
        prompts,
        "--out",
        tmp_path / "g",
        "--transcoders",
        tmp_path / "g" / "transcoders",
        "--slug",
        "two",
        "--node-threshold",
        "0.5",
    )
    assert result.returncode == 0, result.stderr
    assert "training" not in result.stdout
    for i in range(2):
        check_schema(json.loads((tmp_path / "g" / f"two-{i}.json").read_text()))
    listed = json.loads((tmp_path / "g" / "graph-metadata.json").read_text())
    assert [g["slug"] for g in listed["graphs"]] == ["graph", "two-0", "two-1"]
    same = json.loads((tmp_path / "g" / "two-0.json").read_text())
    assert len(same["nodes"]) <= len(doc["nodes"])  # a lower node threshold keeps fewer


@pytest.mark.parametrize(
    "args, words",
    [
        ([], ["--prompt"]),
        (["--prompt", "1 +", "--prompts", "x"], ["one of them"]),
        (["--prompt", "1 2 3 4 5 6 7 8 9 +"], ["10 tokens", "1..8"]),
        (["--prompt", "1 +", "--node-threshold", "2"], ["--node-threshold", "between 0 and 1"]),
        (["--prompt", "1 +", "--slug", "../x"], ["--slug"]),
        (["--prompt", "1 +", "--transcoders", "nowhere"], ["nowhere", "not a folder"]),
        (["--prompt", "1 +", "--max-logits", "0"], ["--max-logits"]),
        (["--prompt", "zz +"], ["'zz'", "vocabulary"]),
    ],
)
def test_refusals_are_one_line(paper_run, tmp_path, args, words):
    assert_one_line_error(cli_here("graph", paper_run, "--out", tmp_path / "g", *args), *words)


def test_a_folder_without_transcoders_is_refused(paper_run, tmp_path):
    (tmp_path / "empty").mkdir()
    result = cli_here(
        "graph",
        paper_run,
        "--prompt",
        "1 +",
        "--out",
        tmp_path / "g",
        "--transcoders",
        tmp_path / "empty",
    )
    assert_one_line_error(result, "no transcoder for block 0")
