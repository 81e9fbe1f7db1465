"""Model configuration, with TransformerLens field names, and the named presets."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .errors import FlatformerError
from .store.limits import number, whole
from .errors import did_you_mean

# Each size's valid range: generous for tiny models, and small enough that a config (typed, or
# read from a run folder someone handed us) can never ask for more than a machine has.
LIMITS = {
    "d_model": (1, 1024),
    "n_heads": (1, 64),
    "d_head": (1, 1024),
    "n_layers": (1, 48),
    "d_mlp": (0, 16384),
    "n_ctx": (1, 2048),
    "d_vocab": (2, 100_000),
}
MAX_PARAMS = 20_000_000
ACT_FNS = ("relu", "gelu", "gelu_erf", "silu", "solu_ln")
NORMALIZATIONS = ("none", "pre_ln", "pre_rms")
POSITIONS = ("standard", "rotary", "shortformer")
# Fields added after runs were first saved, left out of a saved config at their default.
LATER_DEFAULTS = {
    "attn_out_bias": False,
    "d_vocab_out": 0,
    "causal": True,
    "attn_coeff": 1.0,
    "eps": 1e-5,
    "positional_embedding_type": "standard",
    "rotary_dim": 0,
    "rotary_base": 10000.0,
    "rotary_adjacent_pairs": False,
    "gated_mlp": False,
    "parallel_attn_mlp": False,
    "n_key_value_heads": 0,
    "attn_types": (),
    "window_size": 0,
}

# The model's two constants, shared by every implementation: TransformerLens's LayerNorm eps
# and GPT-2's tanh GELU's sqrt(2 / pi).
LN_EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer. Field names follow TransformerLens.

    `normalization="pre_ln"` puts a LayerNorm before attention and before the MLP of every block.
    `ln_final=True` adds a LayerNorm between the last block and the unembedding (TransformerLens's
    `ln_final`); without it the logit lens is exact. `d_mlp=0` makes the blocks attention-only
    (TransformerLens's `attn_only`): no MLP, no `ln2`, and no `hook_resid_mid`, since the stream
    after attention is the block's output. `act_fn="gelu"` is the tanh
    approximation (GPT-2's, TransformerLens's "gelu_new"): it has the same float64 value in NumPy,
    PyTorch and JavaScript, which lets every implementation agree to 1e-9.
    """

    d_model: int = 2
    n_heads: int = 1
    d_head: int = 2
    n_layers: int = 1
    d_mlp: int = 32
    n_ctx: int = 8
    d_vocab: int = 12
    act_fn: str = "relu"
    normalization: str = "none"
    qkv_bias: bool = False
    attn_out: bool = False  # an output projection W_O; without it heads are concatenated
    unembed_bias: bool = True
    ln_final: bool = False  # a LayerNorm between the last block and the unembedding
    # Fields for imported models, written into a config only when they differ from these
    # defaults, so every config and checkpoint saved before them stays byte-identical.
    attn_out_bias: bool = False  # the attention output bias b_O (d_model,), added after W_O
    d_vocab_out: int = 0  # tokens the unembedding predicts (0: d_vocab), as in grokking's model
    causal: bool = True  # False: every query reads every key (compiled RASP programs)
    # Zhong et al. 2023's attention rate: coeff * softmax + (1 - coeff) on every key a query
    # reads (components.attention); 1 is ordinary attention, 0 sums the values it reads.
    attn_coeff: float = 1.0
    # The architectures of the field's small models (Llama, Qwen, Pythia, GPT-J), by
    # TransformerLens's names; each default is the classic GPT-2 block.
    eps: float = 1e-5  # LayerNorm's or RMSNorm's epsilon
    positional_embedding_type: str = "standard"  # rotary: no W_pos, q and k rotated (RoPE);
    # shortformer: W_pos added to q and k's inputs, not to the stream
    rotary_dim: int = 0  # dimensions of each head rotated, the first ones (0: all of d_head)
    rotary_base: float = 10000.0  # RoPE's theta: the angle of pair i is pos / base^(2i/r)
    rotary_adjacent_pairs: bool = False  # False: rotate halves (GPT-NeoX, Llama); True: GPT-J
    gated_mlp: bool = False  # act(x W_gate) * (x W_in) + b_in before W_out (SwiGLU, GeGLU)
    parallel_attn_mlp: bool = False  # the MLP reads the block's input, not attention's output
    n_key_value_heads: int = 0  # grouped-query attention: K and V heads (0: n_heads)
    attn_types: tuple = ()  # per layer "global" or "local" (GPT-Neo); empty: all global
    window_size: int = 0  # a local layer's query reads the window_size latest keys, itself too

    def __post_init__(self):
        for name, (lo, hi) in LIMITS.items():
            whole(f"config: {name}", getattr(self, name), lo, hi)
        for name in (
            "qkv_bias",
            "attn_out",
            "unembed_bias",
            "ln_final",
            "attn_out_bias",
            "causal",
            "rotary_adjacent_pairs",
            "gated_mlp",
            "parallel_attn_mlp",
        ):
            if not isinstance(getattr(self, name), bool):
                raise FlatformerError(
                    f"config: {name} must be true or false, got {getattr(self, name)!r}"
                )
        if self.act_fn not in ACT_FNS:
            raise FlatformerError(
                f"config: act_fn must be one of {', '.join(ACT_FNS)}, got {self.act_fn!r}"
            )
        whole("config: d_vocab_out", self.d_vocab_out, 0, self.d_vocab)
        # stored as a float, so that a file's 0 and 1 read back as the same model's 0.0 and 1.0
        object.__setattr__(self, "attn_coeff", number("config: attn_coeff", self.attn_coeff, 0, 1))
        if self.d_vocab_out == 1:
            raise FlatformerError(
                "config: d_vocab_out must be 0 (all of d_vocab) or at least 2, got 1"
            )
        if self.attn_out_bias and not self.attn_out:
            raise FlatformerError("config: attn_out_bias (b_O) needs attn_out (W_O)")
        if self.normalization not in NORMALIZATIONS:
            raise FlatformerError(
                f"config: normalization must be one of {', '.join(NORMALIZATIONS)}, "
                f"got {self.normalization!r}"
            )
        self._check_architecture()
        if not self.attn_out and self.n_heads * self.d_head != self.d_model:
            raise FlatformerError(
                f"config: without W_O (attn_out=false) n_heads * d_head must equal d_model, "
                f"got {self.n_heads} * {self.d_head} != {self.d_model}"
            )
        if self.n_params > MAX_PARAMS:
            raise FlatformerError(
                f"config: {self.n_params:,} parameters; flatformer is made for "
                f"models of at most {MAX_PARAMS:,}"
            )

    def _check_architecture(self):
        """The fields of the newer architectures: each in range, and consistent."""
        for name in ("eps", "rotary_base"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise FlatformerError(f"config: {name} must be a number, got {value!r}")
        if not 0 < self.eps <= 0.1:
            raise FlatformerError(f"config: eps must be in (0, 0.1], got {self.eps!r}")
        if not 1 < self.rotary_base <= 1e9:
            raise FlatformerError(
                f"config: rotary_base must be in (1, 1e9], got {self.rotary_base!r}"
            )
        if self.positional_embedding_type not in POSITIONS:
            raise FlatformerError(
                f"config: positional_embedding_type must be one of {', '.join(POSITIONS)}, "
                f"got {self.positional_embedding_type!r}"
            )
        whole("config: rotary_dim", self.rotary_dim, 0, self.d_head)
        if self.rotary_dim % 2:
            raise FlatformerError(f"config: rotary_dim must be even, got {self.rotary_dim}")
        if self.positional_embedding_type == "rotary" and self.d_head % 2 and not self.rotary_dim:
            raise FlatformerError("config: rotary positions need an even d_head or rotary_dim")
        whole("config: n_key_value_heads", self.n_key_value_heads, 0, self.n_heads)
        if self.n_key_value_heads and self.n_heads % self.n_key_value_heads:
            raise FlatformerError(
                f"config: n_heads ({self.n_heads}) must be a multiple of n_key_value_heads "
                f"({self.n_key_value_heads})"
            )
        if not isinstance(self.attn_types, (list, tuple)):
            raise FlatformerError(f"config: attn_types must be a list, got {self.attn_types!r}")
        object.__setattr__(self, "attn_types", tuple(self.attn_types))  # hashable, as saved
        if self.attn_types and len(self.attn_types) != self.n_layers:
            raise FlatformerError(
                f"config: attn_types names {len(self.attn_types)} layers, the model has "
                f"{self.n_layers}"
            )
        if any(t not in ("global", "local") for t in self.attn_types):
            raise FlatformerError(
                f"config: attn_types must be global or local, got {list(self.attn_types)}"
            )
        whole("config: window_size", self.window_size, 0, LIMITS["n_ctx"][1])
        if "local" in self.attn_types and not self.window_size:
            raise FlatformerError("config: local attention layers need a window_size >= 1")
        if self.act_fn == "solu_ln" and self.gated_mlp:
            raise FlatformerError("config: act_fn solu_ln (SoLU with its LayerNorm) is not gated")
        if self.parallel_attn_mlp and self.attn_only:
            raise FlatformerError("config: parallel_attn_mlp needs an MLP (d_mlp > 0)")

    def window(self, layer: int) -> int:
        """The keys a query of `layer` reads: window_size in a local layer, else 0 (all)."""
        local = self.attn_types and self.attn_types[layer] == "local"
        return self.window_size if local else 0

    @property
    def rotary(self) -> bool:
        """Rotary positions (RoPE): q and k rotated by position, no W_pos."""
        return self.positional_embedding_type == "rotary"

    @property
    def shortformer(self) -> bool:
        """Shortformer positions (Press et al. 2021): W_pos added to q and k's inputs only, not
        to the residual stream (TransformerLens's attn-only and redwood models)."""
        return self.positional_embedding_type == "shortformer"

    @property
    def rotated_dims(self) -> int:
        """The dimensions of each head that rotary positions rotate (rotary_dim, else d_head)."""
        return self.rotary_dim or self.d_head

    @property
    def n_kv_heads(self) -> int:
        """Heads of keys and values: n_key_value_heads (grouped-query attention) or n_heads."""
        return self.n_key_value_heads or self.n_heads

    @property
    def grouped(self) -> bool:
        """Grouped-query attention: fewer key and value heads than query heads, each shared by
        n_heads / n_kv_heads query heads (TransformerLens's `_W_K`, `_W_V`)."""
        return self.n_kv_heads != self.n_heads

    @property
    def norm_kind(self) -> str:
        """The kind of every normalisation of the model, final one included: "rms" or "ln"."""
        return "rms" if self.normalization == "pre_rms" else "ln"

    @property
    def pre_norm(self) -> bool:
        """A normalisation before attention and before the MLP (LayerNorm or RMSNorm)."""
        return self.normalization != "none"

    def newer_features(self) -> list[str]:
        """The features of this model beyond the classic GPT-2 block, in words: what a part of
        flatformer that computes only the classic block names when it refuses the model."""
        names = {
            "RMSNorm": self.normalization == "pre_rms",
            "rotary positions": self.rotary,
            "shortformer positions": self.shortformer,
            "gated MLP": self.gated_mlp,
            "parallel attention and MLP": self.parallel_attn_mlp,
            "grouped-query attention": self.grouped,
            "SiLU": self.act_fn == "silu",
            "SoLU": self.act_fn == "solu_ln" and not self.attn_only,
            "local attention": "local" in self.attn_types,
            f"eps {self.eps:g}": self.eps != 1e-5,
        }
        return [name for name, used in names.items() if used]

    @property
    def vocab_out(self) -> int:
        """The number of logits: d_vocab_out, or d_vocab when that is 0."""
        return self.d_vocab_out or self.d_vocab

    @property
    def attn_only(self) -> bool:
        """Blocks without an MLP (TransformerLens's `attn_only`)."""
        return self.d_mlp == 0

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter's TransformerLens name and shape (without the seed axis), in order."""
        d, h, dh, m, v = self.d_model, self.n_heads, self.d_head, self.d_mlp, self.d_vocab
        shapes = {"embed.W_E": (v, d)}
        if not self.rotary:
            shapes["pos_embed.W_pos"] = (self.n_ctx, d)

        def norm(name):
            shapes[name + ".w"] = (d,)
            if self.norm_kind == "ln":
                shapes[name + ".b"] = (d,)

        for layer in range(self.n_layers):
            b = f"blocks.{layer}."
            if self.pre_norm:
                norm(b + "ln1")
            for w in "QKV":
                shapes[b + attn_weight(self, w)] = (self.heads_of(w), d, dh)
            if self.qkv_bias:
                for w in "QKV":
                    shapes[b + attn_weight(self, w, "b")] = (self.heads_of(w), dh)
            if self.attn_out:
                shapes[b + "attn.W_O"] = (h, dh, d)
            if self.attn_out_bias:
                shapes[b + "attn.b_O"] = (d,)
            if self.attn_only:
                continue
            if self.pre_norm:
                norm(b + "ln2")
            if self.gated_mlp:
                shapes[b + "mlp.W_gate"] = (d, m)
            shapes[b + "mlp.W_in"], shapes[b + "mlp.b_in"] = (d, m), (m,)
            if self.act_fn == "solu_ln":  # SoLU's LayerNorm over the d_mlp neurons
                shapes[b + "mlp.ln.w"], shapes[b + "mlp.ln.b"] = (m,), (m,)
            shapes[b + "mlp.W_out"], shapes[b + "mlp.b_out"] = (m, d), (d,)
        if self.ln_final:
            norm("ln_final")
        shapes["unembed.W_U"] = (d, self.vocab_out)
        if self.unembed_bias:
            shapes["unembed.b_U"] = (self.vocab_out,)
        return shapes

    def heads_of(self, w: str) -> int:
        """Heads of the projection `w` (Q, K or V): keys and values have n_kv_heads."""
        return self.n_heads if w == "Q" else self.n_kv_heads

    @property
    def n_params(self) -> int:
        total = 0
        for shape in self.param_shapes().values():
            size = 1
            for n in shape:
                size *= n
            total += size
        return total

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["attn_types"] = list(self.attn_types)
        for name, default in LATER_DEFAULTS.items():
            if data[name] == default or name == "attn_types" and not data[name]:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        if not isinstance(data, dict):
            raise FlatformerError(
                f"config: the model must be an object of fields, got {data!r:.60}"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise FlatformerError(f"config: unknown model field(s) {', '.join(unknown)}")
        return cls(**data)

    def replace(self, **changes) -> "ModelConfig":
        return self.from_dict({**self.to_dict(), **changes})


def attn_weight(cfg: ModelConfig, w: str, kind: str = "W") -> str:
    """The name of attention's weight (kind "W") or bias ("b") `w` (Q, K, V) within a block:
    `attn.W_K`, or TransformerLens's `attn._W_K` for grouped keys and values (n_kv_heads of
    them, each shared by a group of query heads)."""
    under = "_" if cfg.grouped and w in "KV" else ""
    return f"attn.{under}{kind}_{w}"


def require_causal(cfg: ModelConfig, what: str) -> None:
    """One line refusing a model that attends to every key (causal: false, as compiled RASP
    programs do) where `what` computes causal attention only."""
    if not cfg.causal:
        raise FlatformerError(
            f"{what} computes causal attention only; this model attends to every key "
            "(causal: false)"
        )


PRESETS: dict[str, dict] = {
    # Source 1: embedding and head size 2, one head, no W_O, no LayerNorm, ReLU MLP 2 -> 32 -> 2.
    # 250 parameters at vocabulary 12.
    "paper-2d": dict(
        d_model=2,
        n_heads=1,
        d_head=2,
        n_layers=1,
        d_mlp=32,
        n_ctx=8,
        act_fn="relu",
        normalization="none",
        qkv_bias=False,
        attn_out=False,
        unembed_bias=True,
    ),
    # Source 2: 16-dim, 2 heads of 8 with W_O, pre-LayerNorm, 32-unit GELU MLP, no biases on
    # attention or unembedding. 3,184 parameters at vocabulary 28.
    "simulator-16d": dict(
        d_model=16,
        n_heads=2,
        d_head=8,
        n_layers=1,
        d_mlp=32,
        n_ctx=8,
        act_fn="gelu",
        normalization="pre_ln",
        qkv_bias=False,
        attn_out=True,
        unembed_bias=False,
    ),
    # The paper's plane with a second layer: for tasks one attention step cannot solve.
    "paper-2d-2layer": dict(
        d_model=2,
        n_heads=1,
        d_head=2,
        n_layers=2,
        d_mlp=32,
        n_ctx=8,
        act_fn="relu",
        normalization="none",
        qkv_bias=False,
        attn_out=False,
        unembed_bias=True,
    ),
    # Two heads of size 2 in a 4-dim stream with W_O: the smallest model with two heads.
    "small-4d-2head": dict(
        d_model=4,
        n_heads=2,
        d_head=2,
        n_layers=1,
        d_mlp=32,
        n_ctx=8,
        act_fn="relu",
        normalization="none",
        qkv_bias=False,
        attn_out=True,
        unembed_bias=True,
    ),
    # Attention only, two layers of two heads, a 48-token context: the model family that forms
    # induction heads (task `induction`; its 1-layer control is the same with n_layers=1). Two
    # heads per layer, so that the circuit's pair has to stand out from the other pairs.
    "attn-only-2l": dict(
        d_model=32,
        n_heads=2,
        d_head=8,
        n_layers=2,
        d_mlp=0,
        n_ctx=48,
        act_fn="relu",
        normalization="none",
        qkv_bias=False,
        attn_out=True,
        unembed_bias=True,
        ln_final=False,
    ),
    # Grokking (Nanda et al. 2023's shape, smaller): one block, no LayerNorm, 4 heads with W_O, a
    # ReLU MLP, no biases on attention or unembedding, a context of exactly `a b =`. The
    # modular-addition task's default; the `grokking` recipe says how its size was chosen.
    "grokking-1l": dict(
        d_model=64,
        n_heads=4,
        d_head=16,
        n_layers=1,
        d_mlp=256,
        n_ctx=3,
        act_fn="relu",
        normalization="none",
        qkv_bias=False,
        attn_out=True,
        unembed_bias=False,
    ),
}


def preset(name: str, d_vocab: int, **overrides) -> ModelConfig:
    """The named preset at a task's vocabulary size, with optional field overrides."""
    if name not in PRESETS:
        raise FlatformerError(
            f"unknown preset {name!r}{did_you_mean(name, PRESETS)}; choose one "
            f"of {', '.join(PRESETS)}"
        )
    return ModelConfig.from_dict({**PRESETS[name], "d_vocab": d_vocab, **overrides})
