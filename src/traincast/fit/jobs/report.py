"""Rankings as rows and text."""

from __future__ import annotations

from typing import Sequence


from traincast.fit.jobs.models import ModelScore

def ranking_rows(scores: Sequence[ModelScore]) -> list[dict]:
    """Plain dict rows of a ranking, for tables and JSON."""
    return [{"model": s.model, "label": s.label, "params": s.params, "log_target": s.log_target,
             "features": s.n_features, "mape_pct": round(s.mape_pct, 3), "rmse": round(s.rmse, 6)}
            for s in scores]


def format_ranking(scores: Sequence[ModelScore], unit: str = "") -> str:
    """A plain-text ranking table (model, RMSE, MAPE) like the AI Gauge slide."""
    lines = [f"{'model':32s} {'RMSE':>12s} {'MAPE %':>8s}  {'log y':5s} {'feat':>4s}  params"]
    for s in scores:
        lines.append(f"{s.label:32s} {s.rmse:12.4g} {s.mape_pct:8.2f}  {'yes' if s.log_target else 'no':5s} "
                     f"{s.n_features:4d}  {s.params}")
    return "\n".join(lines)
