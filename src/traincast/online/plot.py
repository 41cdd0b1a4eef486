"""PNG plots: the loss-curve fit and the history of remaining-time estimates."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from traincast.errors import png_path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _check_path(path) -> Path:
    return png_path(path)


def plot_loss_fit(steps, losses, model, path, target_loss: float | None = None, stt=None) -> Path:
    """Observed losses, the fitted curve extended to the target, the predicted step."""
    p = _check_path(path)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = np.asarray(steps, dtype=float)
    losses = np.asarray(losses, dtype=float)
    ax.plot(steps, losses, ".", ms=2 if len(steps) > 500 else 5, alpha=0.5, label="loss")
    k_end = steps.max()
    if stt is not None and np.isfinite(stt.high):
        k_end = max(k_end, stt.high * 1.1)
    ks = np.linspace(max(steps.min(), 1), k_end, 400)
    ax.plot(ks, model.predict(ks), "-", label=f"fit ({model.form_})")
    if target_loss is not None:
        ax.axhline(target_loss, ls="--", c="gray", lw=1, label=f"target {target_loss:g}")
    if stt is not None and np.isfinite(stt.steps):
        ax.axvline(stt.steps, c="C3", lw=1, label=f"predicted step {stt.steps:,.0f}")
        if np.isfinite(stt.low) and np.isfinite(stt.high):
            ax.axvspan(stt.low, stt.high, color="C3", alpha=0.15)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p


def plot_forecast(steps, losses, draws, path, fc) -> Path:
    """Observed losses, the median and 80% band of the sampled future curves, the target and predicted step."""
    p = _check_path(path)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = np.asarray(steps, dtype=float)
    losses = np.asarray(losses, dtype=float)
    ax.plot(steps, losses, ".", ms=2 if len(steps) > 500 else 5, alpha=0.5, label="loss")
    if draws is not None and len(draws.curves):
        med = np.median(draws.curves, axis=0)
        lo, hi = np.quantile(draws.curves, [0.1, 0.9], axis=0)
        ax.plot(draws.steps, med, "-", c="C1", label="forecast (median)")
        ax.fill_between(draws.steps, lo, hi, color="C1", alpha=0.2, label="80% band")
    ax.axhline(fc.target_loss, ls="--", c="gray", lw=1, label=f"target {fc.target_loss:g}")
    if np.isfinite(fc.steps):
        ax.axvline(fc.steps, c="C3", lw=1, label=f"predicted step {fc.steps:,.0f}")
        if np.isfinite(fc.low):
            ax.axvspan(fc.low, fc.high if np.isfinite(fc.high) else fc.horizon_steps, color="C3", alpha=0.1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"schedule: {fc.schedule or 'none'}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p


def plot_eta_history(history, path) -> Path:
    """Estimated total duration (elapsed + remaining, with band) as the job went."""
    p = _check_path(path)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    x = [h.step for h in history]
    tot = [h.elapsed_s + h.remaining_s for h in history]
    lo = [h.elapsed_s + h.low_s for h in history]
    hi = [h.elapsed_s + h.high_s for h in history]
    ax.plot(x, tot, "-o", ms=3, label="estimated total")
    ax.fill_between(x, lo, hi, alpha=0.2, label="band")
    ax.set_xlabel("step")
    ax.set_ylabel("total duration (s)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p
