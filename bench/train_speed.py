"""Training speed: steps per second for one run, per-seed steps per second for 64 batched seeds,
and the same model in a plain eager PyTorch loop, measured in the same process.

    python bench/train_speed.py [--steps 2000]
"""

import argparse
import time

import torch

from flatformer.config import preset
from flatformer.data import TaskData
from flatformer.tasks import get_task
from flatformer.train import Job, Trainer, batch_indices, get_recipe

torch.set_num_threads(1)  # on this 2-core machine two threads made a tiny step up to 50x slower


def numpy_rate(data, cfg, n_seeds, steps):
    recipe = get_recipe("paper", steps=steps)
    trainer = Trainer(Job(get_task("plus-last-even"), cfg, recipe, list(range(n_seeds)),
                          [None] * n_seeds), data)
    trainer.train_step()
    start = time.perf_counter()
    for _ in range(steps):
        trainer.train_step()
    return steps / (time.perf_counter() - start)


def torch_rate(data, cfg, steps):
    from flatformer.bridge import TorchTransformer
    recipe = get_recipe("paper")
    trainer = Trainer(Job(get_task("plus-last-even"), cfg, recipe, [0], [None]), data)
    model = TorchTransformer(cfg, trainer.params.seed(0))
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    idx = batch_indices(0, 0, 0, len(data.train_starts), recipe.batch_size)
    batches = [data.train.windows(data.train_starts[i], cfg.n_ctx, False) for i in idx]
    start = time.perf_counter()
    for step in range(steps):
        inputs, targets, _ = batches[step % len(batches)]
        opt.zero_grad()
        logits = model(torch.from_numpy(inputs))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.d_vocab),
                                                 torch.from_numpy(targets).reshape(-1))
        loss.backward()
        opt.step()
    return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    cfg = preset("paper-2d", 12)
    data = TaskData.build(get_task("plus-last-even"), cfg.n_ctx)
    one = numpy_rate(data, cfg, 1, args.steps)
    many = numpy_rate(data, cfg, 64, args.steps // 4) * 64
    eager = torch_rate(data, cfg, args.steps // 2)
    print(f"numpy, one run:          {one:9.0f} steps/s  ({1e3 / one:.3f} ms/step)")
    print(f"numpy, 64 seeds batched: {many:9.0f} seed-steps/s  ({1e3 / many:.3f} ms/seed-step)")
    print(f"torch eager, one run:    {eager:9.0f} steps/s  ({1e3 / eager:.3f} ms/step)")
    print(f"speed-up over eager PyTorch: {one / eager:.1f}x for one run, "
          f"{many / eager:.1f}x per seed batched")


if __name__ == "__main__":
    main()
