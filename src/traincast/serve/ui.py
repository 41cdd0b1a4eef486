"""The web UI: a plan explorer, a jobs dashboard and a compare page (Jinja2 pages, plotly in the browser)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.templating import Jinja2Templates

templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))

PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16", "bf16", "pure-bf16", "fp16")


def _choices():
    from traincast.hardware import get_catalog
    from traincast.workload import llms, zoo

    cat = get_catalog()
    priced = sorted({i.device.name for i in cat.instances.values()
                     if i.usd_per_hour is not None and i.device.kind == "gpu"})
    return {"models": [*zoo.ZOO.values(), *llms.entries()], "gpus": priced, "precisions": PRECISIONS}


def ui_router() -> APIRouter:
    r = APIRouter(include_in_schema=False)

    def page(request: Request, name: str, **ctx):
        st = request.app.state
        return templates.TemplateResponse(request, name, {
            "page": name.split(".")[0], "refresh_s": st.settings.refresh_s, "db": st.store.dialect,
            **_choices(), **ctx})

    @r.get("/")
    def plan_page(request: Request):
        return page(request, "plan.html")

    @r.get("/jobs")
    def jobs_page(request: Request):
        return page(request, "jobs.html")

    @r.get("/compare")
    def compare_page(request: Request):
        return page(request, "compare.html")

    return r
