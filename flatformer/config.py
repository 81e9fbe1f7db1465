"""Model configuration, with TransformerLens field names, and the named presets."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .errors import FlatformerError
from .limits import number, whole
from .suggest import did_you_mean

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
ACT_FNS = ("relu", "gelu", "gelu_erf")
# Fields added after runs were first saved, left out of a saved config at their default.
LATER_DEFAULTS = {"attn_out_bias": False, "d_vocab_out": 0, "causal": True, "attn_coeff": 1.0}

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

    def __post_init__(self):
        for name, (lo, hi) in LIMITS.items():
            whole(f"config: {name}", getattr(self, name), lo, hi)
        for name in ("qkv_bias", "attn_out", "unembed_bias", "ln_final", "attn_out_bias", "causal"):
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
        if self.normalization not in ("none", "pre_ln"):
            raise FlatformerError(
                f"config: normalization must be none or pre_ln, got {self.normalization!r}"
            )
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
        shapes = {"embed.W_E": (v, d), "pos_embed.W_pos": (self.n_ctx, d)}
        for layer in range(self.n_layers):
            b = f"blocks.{layer}."
            if self.normalization == "pre_ln":
                shapes[b + "ln1.w"], shapes[b + "ln1.b"] = (d,), (d,)
            for w in "QKV":
                shapes[b + f"attn.W_{w}"] = (h, d, dh)
            if self.qkv_bias:
                for w in "QKV":
                    shapes[b + f"attn.b_{w}"] = (h, dh)
            if self.attn_out:
                shapes[b + "attn.W_O"] = (h, dh, d)
            if self.attn_out_bias:
                shapes[b + "attn.b_O"] = (d,)
            if self.attn_only:
                continue
            if self.normalization == "pre_ln":
                shapes[b + "ln2.w"], shapes[b + "ln2.b"] = (d,), (d,)
            shapes[b + "mlp.W_in"], shapes[b + "mlp.b_in"] = (d, m), (m,)
            shapes[b + "mlp.W_out"], shapes[b + "mlp.b_out"] = (m, d), (d,)
        if self.ln_final:
            shapes["ln_final.w"], shapes["ln_final.b"] = (d,), (d,)
        shapes["unembed.W_U"] = (d, self.vocab_out)
        if self.unembed_bias:
            shapes["unembed.b_U"] = (self.vocab_out,)
        return shapes

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
        for name, default in LATER_DEFAULTS.items():
            if data[name] == default:
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
