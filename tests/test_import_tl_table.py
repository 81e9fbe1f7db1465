"""TransformerLens's own small families, each built the way the installed TransformerLens loads
it, saved as its users save it (`bridge.cfg.to_dict()` and the state dict) and imported.

TransformerLens 4 loads NeelNanda's and ArthurConmy's models with `TransformerBridge.
boot_tl_legacy(name)`: `derive_tl_legacy_config` reads the repository's `config.json`, the
native model is built from it and the repository's state dict is loaded. Here the two
downloads are replaced by a `config.json` in the repositories' own fields at a small width and
random weights in HookedTransformer's names, so everything between them is TransformerLens's own
code. The imported model's logits and common hooks are held to that bridge's forward pass in
float64 to 1e-9.

TransformerLens 4 refuses to build the shortformer families (attn-only-Nl, attn-only-2l-demo,
redwood): `derive_tl_legacy_config` raises. Their config is TransformerLens's own config class
with the fields TransformerLens 3 derived from the same `config.json` (`shortformer_pos` read
as `positional_embedding_type = "shortformer"`), and the oracle is TransformerLens's
attention-only block written out (the test below it says how it reads positions).
"""

import json

import numpy as np
import pytest
import torch
from transformer_lens import supported_models
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.model_bridge.sources import tl_legacy

from flatformer.importers import tlens
from flatformer.model.transformer import Transformer

D, H, DH, M, T, V = 16, 4, 4, 32, 8, 14
# A repository's config.json, in the fields its training code wrote, shrunk.
REPO = dict(d_model=D, d_head=DH, n_heads=H, d_mlp=M, n_ctx=T, d_vocab=V, normalization="LN",
            tokenizer_name=None, shortformer_pos=False)  # fmt: skip


def family(name, layers, **fields):
    return name, dict(REPO, n_layers=layers, **fields)


FAMILIES = dict(
    [family(f"gelu-{n}l", n, act_fn="gelu", attn_only=False) for n in (1, 2, 3, 4)]
    + [family(f"solu-{n}l", n, act_fn="solu_ln", attn_only=False) for n in (1, 2, 3, 4)]
    + [
        family(f"attn-only-{n}l", n, act_fn="solu_ln", attn_only=True, shortformer_pos=True)
        for n in (1, 2, 3, 4)
    ]
    + [
        family("attn-only-2l-demo", 2, act_fn="solu_ln", attn_only=True, shortformer_pos=True),
        family("redwood_attn_2l", 2, act_fn="gelu_new", attn_only=True, shortformer_pos=True),
        family("othello-gpt", 2, act_fn="gelu", attn_only=False, architecture="mingpt"),
    ]
)
SHORTFORMER = [name for name, c in FAMILIES.items() if c["shortformer_pos"]]
# Hooks compared by name. `hook_normalized` is left out: flatformer's is after the gain and bias
# (the import guide names the difference).
SKIPPED_HOOKS = ("hook_normalized",)


def official(alias: str) -> str:
    """The repository TransformerLens's own table names for an alias."""
    return supported_models.get_official_model_name(alias)


def legacy_weights(c: dict, seed: int) -> dict:
    """Random weights in HookedTransformer's names (float64), off the initialisation's ones
    and zeros, as a repository's state dict holds them."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.3, centre=0.0):
        return centre + scale * torch.randn(*shape, generator=g, dtype=torch.float64)

    s = {"embed.W_E": r(V, D, scale=1.0), "pos_embed.W_pos": r(T, D, scale=1.0)}
    for i in range(c["n_layers"]):
        b = f"blocks.{i}."
        for j in (1,) if c["attn_only"] else (1, 2):
            s[b + f"ln{j}.w"], s[b + f"ln{j}.b"] = r(D, centre=1.0), r(D)
        for w in "QKV":
            s[b + f"attn.W_{w}"], s[b + f"attn.b_{w}"] = r(H, D, DH), r(H, DH)
        s[b + "attn.W_O"], s[b + "attn.b_O"] = r(H, DH, D), r(D)
        if not c["attn_only"]:
            s[b + "mlp.W_in"], s[b + "mlp.b_in"] = r(D, M), r(M)
            s[b + "mlp.W_out"], s[b + "mlp.b_out"] = r(M, D), r(D)
            if c["act_fn"] == "solu_ln":
                s[b + "mlp.ln.w"], s[b + "mlp.ln.b"] = r(M, centre=1.0), r(M)
    s["ln_final.w"], s["ln_final.b"] = r(D, centre=1.0), r(D)
    s["unembed.W_U"], s["unembed.b_U"] = r(D, V, scale=1.0), r(V)
    return s


@pytest.fixture
def offline_repo(monkeypatch):
    """TransformerLens's legacy loader reading a config.json and a state dict given here."""
    given = {}
    monkeypatch.setattr(tl_legacy, "_fetch_json", lambda repo, name: dict(given["config"]))

    def state(repo, cfg, checkpoint_value=None, dtype=torch.float32):
        return {k: v.to(dtype) for k, v in given["state"].items()}

    monkeypatch.setattr(tl_legacy, "fetch_tl_legacy_state_dict", state)
    return given


def as_json(cfg_dict: dict) -> dict:
    """`cfg.to_dict()` as a user writes it to JSON (`dtype` and numpy scalars as text or
    numbers)."""
    out = {}
    for k, v in cfg_dict.items():
        if isinstance(v, np.generic):
            v = v.item()
        out[k] = v if isinstance(v, (int, float, str, bool, type(None), list)) else str(v)
    return json.loads(json.dumps(out))


def save(folder, state, cfg_dict, suffix=".pt"):
    path = folder / f"model{suffix}"
    tensors = {k: v.detach().contiguous() for k, v in state.items()}
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(tensors, path)
    else:
        torch.save(tensors, path)
    (folder / "cfg.json").write_text(json.dumps(as_json(cfg_dict)))
    return path, folder / "cfg.json"


def tokens(seed=0):
    return np.random.default_rng(seed).integers(0, V, (3, T))


def assert_close(ours, theirs, what, tol=1e-9):
    ours, theirs = np.asarray(ours), np.asarray(theirs, dtype=np.float64)
    assert ours.shape == theirs.shape, what
    scale = max(1.0, float(np.abs(theirs).max()))
    err = float(np.abs(ours - theirs).max())
    assert err < tol * scale, f"{what}: off by {err:.2g}"


def test_every_family_here_is_in_the_installed_table():
    table = set(supported_models.OFFICIAL_MODEL_NAMES)
    for alias in FAMILIES:
        assert official(alias) in table
    # NeelNanda's, ArthurConmy's repositories: loaded by the legacy loader below.
    assert all(official(a).startswith(tl_legacy.TL_LEGACY_PREFIXES) for a in FAMILIES)


@pytest.mark.parametrize("alias", [a for a in FAMILIES if a not in SHORTFORMER])
@pytest.mark.parametrize("names", ["bridge", "legacy"])
def test_a_family_as_transformer_lens_loads_it_imports_equal_to_its_forward(
    tmp_path, offline_repo, alias, names
):
    torch.set_num_threads(1)
    c = FAMILIES[alias]
    legacy = legacy_weights(c, seed=len(alias))
    offline_repo.update(config=c, state=legacy)
    bridge = TransformerBridge.boot_tl_legacy(official(alias), dtype=torch.float64).eval()
    state = bridge.state_dict() if names == "bridge" else legacy
    suffix = ".safetensors" if names == "bridge" else ".pt"
    imported = tlens.read(*save(tmp_path, state, bridge.cfg.to_dict(), suffix))
    assert imported.cfg.n_layers == c["n_layers"] and imported.cfg.attn_only == c["attn_only"]
    model = Transformer(imported.cfg, imported.tensors)
    x = tokens()
    ours, cache = model.run_with_cache(x)
    with torch.no_grad():
        theirs, their_cache = bridge.run_with_cache(torch.tensor(x))
    assert_close(ours, theirs.numpy(), f"{alias} logits")
    common = [n for n in cache if n in their_cache and not n.endswith(SKIPPED_HOOKS)]
    assert len(common) >= 8 * c["n_layers"]
    for name in common:
        mine, source = cache[name], their_cache[name].numpy()
        if name.endswith("hook_attn_scores"):
            # TransformerLens 4's bridge fills hook_attn_scores with the pattern (the wrapped
            # attention returns only its weights); the scores are held through the pattern.
            pattern = their_cache[name.replace("hook_attn_scores", "hook_pattern")].numpy()
            assert np.array_equal(source, pattern)
            mine = np.exp(mine - mine.max(-1, keepdims=True))
            mine = mine / mine.sum(-1, keepdims=True)
        assert_close(mine, source, f"{alias} {name}")


def shortformer_forward(s: dict, c: dict, t: np.ndarray) -> tuple[np.ndarray, dict]:
    """TransformerLens's attention-only shortformer model written out (its TransformerBlock
    passes `ln1(x) + pos` as the query and key inputs and `ln1(x)` as the value input; the
    stream never holds the positions): logits and the residual stream at each block."""

    def ln(x, name):
        x = x - x.mean(-1, keepdim=True)
        return x / (x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * s[name + ".w"] + s[name + ".b"]

    resid, pos = s["embed.W_E"][torch.tensor(t)], s["pos_embed.W_pos"][: t.shape[-1]]
    causal = torch.tril(torch.ones(t.shape[-1], t.shape[-1], dtype=torch.bool))
    cache = {}
    for i in range(c["n_layers"]):
        b = f"blocks.{i}."
        cache[b + "hook_resid_pre"] = resid
        x = ln(resid, b + "ln1")
        q = torch.einsum("btd,hde->bthe", x + pos, s[b + "attn.W_Q"]) + s[b + "attn.b_Q"]
        k = torch.einsum("btd,hde->bthe", x + pos, s[b + "attn.W_K"]) + s[b + "attn.b_K"]
        v = torch.einsum("btd,hde->bthe", x, s[b + "attn.W_V"]) + s[b + "attn.b_V"]
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / DH**0.5
        pattern = scores.masked_fill(~causal, -torch.inf).softmax(-1)
        cache[b + "attn.hook_pattern"] = pattern
        z = torch.einsum("bhqk,bkhe->bqhe", pattern, v)
        out = torch.einsum("bqhe,hed->bqd", z, s[b + "attn.W_O"]) + s[b + "attn.b_O"]
        cache[b + "hook_attn_out"] = out
        resid = resid + out
        cache[b + "hook_resid_post"] = resid
    logits = ln(resid, "ln_final") @ s["unembed.W_U"] + s["unembed.b_U"]
    return logits.numpy(), {k: v.numpy() for k, v in cache.items()}


@pytest.mark.parametrize("alias", SHORTFORMER)
def test_a_shortformer_family_imports_equal_to_transformer_lens_block(
    tmp_path, offline_repo, alias
):
    c = FAMILIES[alias]
    legacy = legacy_weights(c, seed=len(alias))
    offline_repo.update(config=c, state=legacy)
    with pytest.raises(NotImplementedError, match="shortformer"):
        TransformerBridge.boot_tl_legacy(official(alias), dtype=torch.float64)
    derived = dict(
        {k: c[k] for k in ("d_model", "n_layers", "d_mlp", "d_head", "n_heads", "n_ctx")},
        d_vocab=V, act_fn=c["act_fn"], attn_only=True, normalization_type=c["normalization"],
        positional_embedding_type="shortformer", tokenizer_name=None,
        original_architecture="neel", model_name=official(alias).split("/")[-1],
        init_weights=False, dtype=torch.float64,
    )  # fmt: skip
    cfg = TransformerBridgeConfig(**derived)
    imported = tlens.read(*save(tmp_path, legacy, cfg.to_dict()))
    assert imported.cfg.shortformer and imported.cfg.attn_only
    x = tokens()
    theirs, their_cache = shortformer_forward(legacy, c, x)
    logits, cache = Transformer(imported.cfg, imported.tensors).run_with_cache(x)
    assert_close(logits, theirs, f"{alias} logits")
    for name, value in their_cache.items():
        assert_close(cache[name], value, f"{alias} {name}")


def word_tokenizer():
    """A tokenizer of the small vocabulary (Llama's folder names a sentencepiece one, which the
    bridge would otherwise load)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from test_import_hf_modern import V

    vocab = {str(i): i for i in range(V)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, "0")))


@pytest.mark.parametrize("kind", ["gpt_neox", "gpt_neo", "llama"])
def test_a_bridge_around_a_hugging_face_family_imports_through_its_folder(tmp_path, kind):
    """Pythia (GPT-NeoX), GPT-Neo and Llama, as TransformerLens 4 loads them (`boot_transformers`):
    the bridge's `cfg.to_dict()` leaves out what the wrapped model computes (GPT-NeoX's
    partial rotary is `rotary_dim` None), so that config is refused in one line naming the
    folder to import instead; the folder the bridge was booted from imports equal to the
    bridge's forward pass."""
    from test_import_hf_modern import build, float64_internals

    from flatformer.errors import FlatformerError
    from flatformer.importers import hf_gpt2

    torch.set_num_threads(1)
    source = float64_internals(build(kind))
    source.save_pretrained(tmp_path / "hf")  # the folder a user boots the bridge from
    bridge = TransformerBridge.boot_transformers(
        str(tmp_path / "hf"), hf_model=source, dtype=torch.float64, tokenizer=word_tokenizer()
    ).eval()
    if kind == "gpt_neox":  # half of each head is turned; the config does not say so
        assert bridge.cfg.to_dict()["rotary_dim"] is None
    with pytest.raises(FlatformerError) as refusal:
        tlens.read(*save(tmp_path, bridge.state_dict(), bridge.cfg.to_dict()))
    assert "\n" not in str(refusal.value) and "save_pretrained" in str(refusal.value)
    imported = hf_gpt2.read(tmp_path / "hf")
    x = np.random.default_rng(0).integers(0, imported.cfg.d_vocab, (3, imported.cfg.n_ctx))
    ours, cache = Transformer(imported.cfg, imported.tensors).run_with_cache(x)
    with torch.no_grad():
        theirs, their_cache = bridge.run_with_cache(torch.tensor(x))
    # The Llama bridge wraps the rotary module with its own, whose angles are float32 (as
    # transformers ships them): float32's precision there; 1e-9 to transformers computing in
    # float64 is test_import_hf_modern's.
    tol = 1e-6 if kind == "llama" else 1e-9
    assert_close(ours, theirs.numpy(), f"{kind} logits", tol)
    for name in ["hook_embed"] + [f"blocks.{i}.hook_resid_post" for i in range(2)]:
        assert_close(cache[name], their_cache[name].numpy(), f"{kind} {name}", tol)


@pytest.mark.parametrize("alias", ["attn-only-2l", "solu-2l"])
def test_an_imported_family_opens_in_circuits_and_the_explorer(tmp_path, offline_repo, alias):
    """The command line on TransformerLens's induction model (attn-only-2l: shortformer
    positions) and a SoLU model: import, the exact circuits, and the page."""
    from clitools import cli_here

    c = FAMILIES[alias]
    legacy = legacy_weights(c, seed=1)
    if c["shortformer_pos"]:
        fields = {k: c[k] for k in ("d_model", "n_layers", "d_mlp", "d_head", "n_heads", "n_ctx")}
        cfg = TransformerBridgeConfig(**fields, d_vocab=V, act_fn=c["act_fn"], attn_only=True,
                                      positional_embedding_type="shortformer")  # fmt: skip
    else:
        offline_repo.update(config=c, state=legacy)
        cfg = TransformerBridge.boot_tl_legacy(official(alias), dtype=torch.float64).cfg
    path, config = save(tmp_path, legacy, cfg.to_dict())
    (tmp_path / "corpus.txt").write_text(" ".join(str(i % V) for i in range(300)))
    run = tmp_path / "run"
    made = cli_here("import", path, "--config", config, "--corpus", tmp_path / "corpus.txt",
                    "--out", run)  # fmt: skip
    assert made.returncode == 0, made.stderr
    circuits = cli_here("circuits", run, "--prompts", "12", "--json")
    assert circuits.returncode == 0, circuits.stderr
    report = json.loads(circuits.stdout)
    assert ("pos" in report["nodes"]) == (not c["shortformer_pos"])
    page = cli_here("explore", run, "--out", tmp_path / "page.html")
    assert page.returncode == 0, page.stderr
    assert "flatformer-explorer-1" in (tmp_path / "page.html").read_text()
