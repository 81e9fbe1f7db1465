"""InterpBench's models (Gupta, Arcuschin et al. 2024, "InterpBench: Semi-Synthetic
Transformers for Evaluating Mechanistic Interpretability Techniques"): a folder per case with
`ll_model.pth` (a TransformerLens `HookedTransformer` state dict), `ll_model_cfg.pkl` (its
config, pickled as a dict or as the config object), `meta.json` (the training arguments) and
`edges.pkl` (the ground-truth circuit as a list of (sender, receiver) hook names, ACDC's).

Nothing in the folder is run: the pickles are read by an unpickler that builds plain data only
(the config object as its fields; a torch dtype as its name), the weights with torch's
weights-only loader. The circuit's edges become the run's known circuit, in the names
`flatformer circuits` uses.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path

from ..errors import FlatformerError
from ..store.read import read_bytes, read_json
from . import tlens, validate
from .common import Imported, sha256, torch_state

FILES = ("ll_model.pth", "ll_model_cfg.pkl")
MAX_PICKLE_BYTES = 16 << 20
# The config object as InterpBench pickled it, before TransformerLens 4 removed the class.
CONFIG_CLASSES = {
    ("transformer_lens.HookedTransformerConfig", "HookedTransformerConfig"),
    ("transformer_lens.config.HookedTransformerConfig", "HookedTransformerConfig"),
}
DTYPES = {"float16", "bfloat16", "float32", "float64"}


class Fields:
    """A pickled config object's fields, and nothing it could do: pickle fills `__dict__`."""


class PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers; a TransformerLens config object as its
    fields (`Fields`), a torch dtype as its name. Any other class or function is refused."""

    def __init__(self, data: bytes, where: str):
        super().__init__(io.BytesIO(data))
        self.where = where

    def find_class(self, module, name):
        if (module, name) in CONFIG_CLASSES:
            return Fields
        if module == "torch" and name in DTYPES:
            return name  # only a label in a config: torch.float32 read as "float32"
        raise FlatformerError(
            f"{self.where} names {module}.{name}: only plain data and a TransformerLens "
            "config are read"
        )


def read_pickle(path: Path, what: str):
    data = read_bytes(path, what, MAX_PICKLE_BYTES)
    try:
        return PlainUnpickler(data, str(path)).load()
    except FlatformerError:
        raise
    except Exception as exc:
        raise FlatformerError(f"{path}: not a readable {what} ({type(exc).__name__})") from None


def is_case(folder: Path) -> bool:
    return folder.is_dir() and all((folder / f).is_file() for f in FILES)


def read(folder: Path) -> Imported:
    folder = Path(folder)
    missing = [f for f in FILES if not (folder / f).is_file()]
    if missing:
        raise FlatformerError(f"{folder}: an InterpBench case needs {', '.join(missing)}")
    cfg = read_pickle(folder / "ll_model_cfg.pkl", "InterpBench config")
    if isinstance(cfg, Fields):
        cfg = dict(vars(cfg))
    if not isinstance(cfg, dict) or not all(isinstance(k, str) for k in cfg):
        raise FlatformerError(f"{folder / 'll_model_cfg.pkl'}: the config must be a dict of fields")
    state = validate.state_dict(torch_state(folder / "ll_model.pth"), str(folder / "ll_model.pth"))
    try:
        imported = tlens.convert(cfg, state)
    except (TypeError, ValueError, AttributeError) as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise FlatformerError(f"{folder}: a value of the wrong type ({first})") from None
    provenance = imported.provenance
    provenance.update(format="interpbench", source=str(folder))
    provenance["sha256"] = sha256(folder / "ll_model.pth")
    if (folder / "meta.json").is_file():
        provenance["training"] = read_json(folder / "meta.json", "meta.json", 1_000_000)
    if (folder / "edges.pkl").is_file():
        edges = read_pickle(folder / "edges.pkl", "edges.pkl")
        provenance["circuit"] = {
            "source": "InterpBench edges.pkl",
            "edges": circuit_edges(edges, imported.cfg.n_layers, imported.cfg.n_heads),
        }
    return imported


HEAD = re.compile(r"blocks\.(\d+)\.attn\.hook_result\[(\d+)\]$")
HEAD_INPUT = re.compile(r"blocks\.(\d+)\.hook_([qkv])_input\[(\d+)\]$")
HEAD_INSIDE = re.compile(r"blocks\.(\d+)\.attn\.hook_[qkv]\[(\d+)\]$")
MLP = re.compile(r"blocks\.(\d+)\.hook_mlp_(in|out)$")


def circuit_edges(edges, n_layers: int, n_heads: int) -> list[list[str]]:
    """ACDC's (sender, receiver) hook names as `circuits` edges: hook_embed -> tok,
    hook_pos_embed -> pos, blocks.0.hook_resid_pre -> both, blocks.L.attn.hook_result[H] -> aL.H,
    blocks.L.hook_mlp_out / hook_mlp_in -> mL, blocks.L.hook_q_input[H] -> aL.H.q (k, v alike),
    the last blocks' hook_resid_post -> logits. The edges inside a head (its q input to its
    queries) are part of the head, not edges of the graph, and are dropped."""
    if not isinstance(edges, (list, tuple, set)):
        raise FlatformerError("edges.pkl must hold a list of (sender, receiver) names")
    out = set()
    for edge in edges:
        if not (isinstance(edge, (list, tuple)) and len(edge) == 2):
            raise FlatformerError(f"edges.pkl: {edge!r} is not a (sender, receiver) pair")
        src, dst = (str(x) for x in edge)
        if HEAD_INSIDE.match(dst):
            continue
        for s in _senders(src, n_layers, n_heads):
            out.add((s, _receiver(dst, n_layers, n_heads)))
    return sorted([s, r] for s, r in out)


def _in_range(name: str, layer: int, head: int | None, n_layers: int, n_heads: int):
    if layer >= n_layers or (head is not None and head >= n_heads):
        raise FlatformerError(
            f"edges.pkl: {name} is outside the model ({n_layers} layers of {n_heads} heads)"
        )


def _senders(name: str, n_layers: int, n_heads: int) -> list[str]:
    if name == "hook_embed":
        return ["tok"]
    if name == "hook_pos_embed":
        return ["pos"]
    if name == "blocks.0.hook_resid_pre":
        return ["tok", "pos"]
    if m := HEAD.match(name):
        layer, head = int(m[1]), int(m[2])
        _in_range(name, layer, head, n_layers, n_heads)
        return [f"a{layer}.{head}"]
    if (m := MLP.match(name)) and m[2] == "out":
        _in_range(name, int(m[1]), None, n_layers, n_heads)
        return [f"m{m[1]}"]
    raise FlatformerError(f"edges.pkl: {name!r} is not a sender flatformer's graph has")


def _receiver(name: str, n_layers: int, n_heads: int) -> str:
    if name == f"blocks.{n_layers - 1}.hook_resid_post":
        return "logits"
    if m := HEAD_INPUT.match(name):
        layer, head = int(m[1]), int(m[3])
        _in_range(name, layer, head, n_layers, n_heads)
        return f"a{layer}.{head}.{m[2]}"
    if (m := MLP.match(name)) and m[2] == "in":
        _in_range(name, int(m[1]), None, n_layers, n_heads)
        return f"m{m[1]}"
    raise FlatformerError(f"edges.pkl: {name!r} is not a receiver flatformer's graph has")
