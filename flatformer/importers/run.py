"""An imported model written as a flatformer run folder: config.json and one checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import __version__
from ..errors import FlatformerError
from ..store.checkpoints import checkpoint_bytes
from ..store.layout import checkpoint_path
from ..store.lock import hold
from ..store.read import read_text
from ..store.run import claim_import, write_config
from ..store.write import atomic_write, make_folder, remove_temporaries
from ..tasks.imported import ImportedTask
from .common import Imported

MAX_CORPUS_BYTES = 64 << 20  # read whole; its last MAX_TEXT_TOKENS tokens are kept
FORMATS = ("nanogpt", "hf", "transformer-lens", "interpbench")
# Earlier names a user may still type: hf-gpt2 was the Hugging Face format before it read more
# than GPT-2.
ALIASES = {"hf-gpt2": "hf"}


def detect(source: Path, config: Path | None = None) -> str:
    """A TransformerLens state dict is the one format that comes with a separate config."""
    if source.is_file() and (config is not None or source.suffix == ".safetensors"):
        return "transformer-lens"
    if source.is_file() and source.suffix in (".pt", ".pth", ".ckpt"):
        return "nanogpt"
    from .interpbench import is_case

    if is_case(source):  # ll_model.pth beside ll_model_cfg.pkl
        return "interpbench"
    if source.is_dir() and (source / "config.json").exists():  # Hugging Face's, not a run's
        return "hf"
    raise FlatformerError(f"{source}: cannot tell its format; give --format ({', '.join(FORMATS)})")


def read_source(
    source: Path,
    fmt: str | None,
    vocab: Path | None,
    config: Path | None = None,
    corpus: Path | None = None,
) -> tuple[Imported, ImportedTask]:
    source = Path(source)
    if not source.exists():
        raise FlatformerError(f"{source}: no such file or folder")
    fmt = ALIASES.get(fmt, fmt) or detect(source, config)
    if fmt not in FORMATS:
        raise FlatformerError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if config is not None and fmt != "transformer-lens":
        raise FlatformerError(f"--config is for TransformerLens state dicts, not {fmt}")
    from . import hf_gpt2, interpbench, nanogpt, tlens

    if fmt == "transformer-lens":
        imported = tlens.read(source, config)
    elif fmt == "interpbench":
        imported = interpbench.read(source)
    else:
        imported = (nanogpt if fmt == "nanogpt" else hf_gpt2).read(source)
    if vocab is not None:
        from .vocab import read_meta

        chars = read_meta(vocab)
        if len(chars) != imported.cfg.d_vocab:
            raise FlatformerError(
                f"{vocab}: {len(chars)} characters, the model has d_vocab {imported.cfg.d_vocab}"
            )
        task = ImportedTask.from_chars(chars)
    elif imported.tokenizer is not None:
        try:
            task, renamed = ImportedTask.from_tokenizer(imported.tokenizer, imported.cfg.d_vocab)
        except FlatformerError as exc:
            raise FlatformerError(f"{source}: {exc}") from None
        imported.provenance["changes"].extend(tokenizer_changes(task, renamed))
    else:
        task = ImportedTask([str(i) for i in range(imported.cfg.d_vocab)])
    if corpus is not None:
        task.set_text(read_text(corpus, "corpus", MAX_CORPUS_BYTES), imported.cfg.n_ctx)
        imported.provenance["corpus"] = {"source": str(corpus), "tokens": len(task.tokens)}
    return imported, task


def tokenizer_changes(task: ImportedTask, renamed: int) -> list[str]:
    """What the import notes of a tokenizer's vocabulary: renamed pieces, unused rows."""
    changes = []
    if renamed:
        changes.append(
            f"tokenizer: whitespace in {renamed} tokens shown by its visible name (␣ ⏎ ⇥)"
        )
    if task.unused:
        first = task.vocab[-task.unused]
        changes.append(
            f"tokenizer: {task.unused} embedding rows beyond its vocabulary, named {first} on "
            "(no text encodes to them)"
        )
    return changes


def weight_dtype(tensors: dict[str, np.ndarray]) -> str:
    """The source's weight dtype as read: float32 when every tensor is (the explorer page then
    carries them as float32), else float64 (`common.as_array` widens every other dtype)."""
    return "float32" if all(v.dtype == np.float32 for v in tensors.values()) else "float64"


def write_run(imported: Imported, task: ImportedTask, out: Path) -> Path:
    """The run folder `out`, claimed as `train` claims one (new, empty, or what a killed import
    left) and locked while it is written, so two imports into one folder cannot both win."""
    out = claim_import(out)
    config = {
        "flatformer": __version__,
        "task": task.name,
        "seed": 0,
        "data_seed": 0,
        "vocab": task.vocab,
        "model": imported.cfg.to_dict(),
        **task.config_extra(),
        "imported": {**imported.provenance, "dtype": weight_dtype(imported.tensors)},
    }
    tensors = {k: np.asarray(v, np.float64) for k, v in imported.tensors.items()}
    path = checkpoint_path(out, 0)
    with hold(out, "an import"):
        claim_import(out)  # again, under the lock: another import may have finished meanwhile
        make_folder(path.parent, "--out")
        for folder in (out, path.parent):
            remove_temporaries(folder)  # a killed import's
        atomic_write(path, checkpoint_bytes(tensors))
        write_config(out, config)
    return out
