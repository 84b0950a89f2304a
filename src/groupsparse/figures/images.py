"""Figures of a real-image run: attention over image slots, example inputs (torch is imported on use)."""

from __future__ import annotations

from . import pyplot, save


def describe(spec) -> str:
    t, p = spec.task, spec.pretrain
    return (
        f"{spec.run}: {t.dataset} {t.classes[0]} vs {t.classes[1]} (transfer {t.transfer_classes[0]} vs "
        f"{t.transfer_classes[1]}), D={t.D} slots, d={t.d} ({t.reduce}), {p.steps} steps, eta={p.eta}, "
        f"batch={p.batch}"
    )


def attention_figure(att, title: str, outdir):
    """Top: final mean attention matrix of every seed (j* row boxed). Bottom: mass per key over training."""
    plt = pyplot()

    seeds = sorted(int(s) for s in att["seed"].unique())
    final = int(att["step"].max())
    D = int(att["key"].max()) + 1
    fig, axes = plt.subplots(2, len(seeds), figsize=(3.0 * len(seeds) + 1, 6.4), squeeze=False)
    for col, seed in enumerate(seeds):
        a = att[att["seed"] == seed]
        j_star = int(a["j_star"].iloc[0])
        m = a[a["step"] == a["step"].max()].pivot(index="key", columns="query", values="mass").to_numpy()
        top = axes[0][col].imshow(m, vmin=0, vmax=1, cmap="viridis")
        axes[0][col].add_patch(plt.Rectangle((-0.5, j_star - 0.5), D, 1, fill=False, edgecolor="red", lw=1.5))
        axes[0][col].set_title(f"seed {seed}, j* = {j_star}", fontsize=9)
        axes[0][col].set_xlabel("query slot j")
        per_key = a.groupby(["key", "step"])["mass"].mean().unstack("step")  # mean over queries
        bottom = axes[1][col].imshow(per_key.to_numpy(), vmin=0, vmax=1, cmap="magma", aspect="auto")
        axes[1][col].axhline(j_star, color="cyan", lw=0.8, ls="--")
        steps = list(per_key.columns)
        axes[1][col].set_xticks(range(len(steps)), [str(s) for s in steps], rotation=60, fontsize=6)
        axes[1][col].set_xlabel("gradient step")
        for ax in (axes[0][col], axes[1][col]):
            ax.set_yticks(range(D))
            ax.tick_params(labelsize=6)
    axes[0][0].set_ylabel("key slot i (red box: j*)")
    axes[1][0].set_ylabel("key slot i (dashed: j*)")
    fig.colorbar(top, ax=axes[0].tolist(), shrink=0.8, label=f"mean S[i, j], step {final}")
    fig.colorbar(bottom, ax=axes[1].tolist(), shrink=0.8, label="mass on key i, mean over queries")
    fig.suptitle(f"{title}\nmean attention over test inputs", fontsize=10)
    return save(fig, outdir, "image_attention")


def examples_figure(spec, tensors, meta, title: str, outdir, count: int, seed: int | None):
    """A few test inputs, slots shown as images, each titled with the attention mass it receives."""
    import numpy as np
    import torch

    from ..config.seeding import task_identity, torch_generator
    from ..data.kinds import make_task
    from ..io.files import InputError
    from ..model.transformer import embed, forward
    from ..training.pretrain import DTYPES

    plt = pyplot()

    seeds, status = list(meta.get("seeds", [])), list(meta.get("status", []))
    if seed is None:
        ok = [s for s, st in zip(seeds, status or ["ok"] * len(seeds)) if st == "ok"]
        seed = (ok or seeds)[0]
    if seed not in seeds:
        raise InputError(f"--seed {seed}: not in the checkpoint, whose seeds are {seeds}")
    i = seeds.index(seed)
    dtype = DTYPES[spec.dtype]
    params = {k[len("param.") :]: t[i : i + 1].to(dtype) for k, t in tensors.items() if k.startswith("param.")}
    task = make_task(spec.task, *task_identity(spec, seed))
    stored = tensors.get("task.relevant")
    if stored is not None and int(stored[i][0]) != task.j_star:
        raise InputError(f"checkpoint: seed {seed} has j* = {int(stored[i][0])}, but the spec gives {task.j_star}")
    rows, y = task.draw(count, torch_generator(*task_identity(spec, seed), "figure-examples"), split="test")
    X = task.features[rows].to(dtype)
    with torch.no_grad():
        f, attn = forward(params, embed(X[None], spec.model), spec.model)
    mass = attn[0].mean(-1)  # (count, D): mass key slot i receives, averaged over queries
    D, j_star = spec.task.D, task.j_star
    fig, axes = plt.subplots(count, D, figsize=(1.25 * D + 1.5, 1.45 * count + 1.0), squeeze=False)
    for b in range(count):
        label = task.classes[int(y[b] > 0)]
        pred = task.classes[int(f[0, b] > 0)]
        for j in range(D):
            ax = axes[b][j]
            img = task.pixels[int(rows[b, j])]
            if img.shape[0] == 1:
                ax.imshow(img[0], cmap="gray_r")
            else:
                ax.imshow(np.clip(np.transpose(img, (1, 2, 0)) / 255.0, 0, 1))
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{mass[b, j]:.2f}", fontsize=8, color="red" if j == j_star else "black")
            if j == j_star:
                for side in ax.spines.values():
                    side.set_edgecolor("red")
                    side.set_linewidth(2.5)
        axes[b][0].set_ylabel(f"y: {label}\npred: {pred}", fontsize=8)
    for j in range(D):
        axes[-1][j].set_xlabel(f"slot {j}" + (" (j*)" if j == j_star else ""), fontsize=8)
    fig.suptitle(
        f"{title}\nseed {seed}: test inputs; above each slot, the attention mass it receives "
        "(mean over queries); red: j*",
        fontsize=9,
    )
    return save(fig, outdir, "image_examples")
