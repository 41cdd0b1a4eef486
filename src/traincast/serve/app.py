"""The FastAPI application: ``/api/v1`` (JSON, OpenAPI at ``/docs``) and the web UI at ``/``."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path as PathParam, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import TypeAdapter, ValidationError

from traincast import __version__
from traincast.errors import TraincastError, UnknownNameError
from traincast.serve.compute import Busy, Compute
from traincast.serve.models import (
    CompareRequest,
    ForecastRequest,
    JobMeta,
    MetricBatch,
    MetricRow,
    ParallelizeRequest,
    PlanRequest,
)
from traincast.serve.security import LimitsMiddleware, require_token
from traincast.serve.settings import ServeSettings

HERE = Path(__file__).parent
JobName = Annotated[str, PathParam(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f/]+$",
                                   description="the job's name, as given to track(job=...)")]
# the kinds of UnknownNameError that name a field of the forecast/plan bodies
_KIND_FIELD = {"model": "model", "GPU": "gpu", "gpu": "gpu", "device": "gpu", "instance": "instance",
               "sync method": "sync", "precision": "precision", "optimizer": "optimizer", "predictor": "predictor"}


def _json(text: str) -> Response:
    return Response(content=text, media_type="application/json")


def _error_422(exc: TraincastError) -> JSONResponse:
    """A library error about the request: 422 in FastAPI's shape, naming the field where the error says it."""
    loc = ["body"]
    if isinstance(exc, UnknownNameError) and exc.kind in _KIND_FIELD:
        loc.append(_KIND_FIELD[exc.kind])
    return JSONResponse({"detail": [{"loc": loc, "msg": str(exc), "type": type(exc).__name__}]}, status_code=422)


def _store(request: Request):
    return request.app.state.store


def _read_guard(request: Request) -> None:
    if request.app.state.settings.private:
        require_token(request)


def api_router() -> APIRouter:
    r = APIRouter(prefix="/api/v1", dependencies=[Depends(_read_guard)])

    # ------------------------------------------------------------- about
    @r.get("/health", tags=["about"])
    def health(request: Request):
        st = _store(request)
        return {"status": "ok", "version": __version__, "db": st.dialect, "schema_version": st.schema_version()}

    @r.get("/models", tags=["about"])
    def models():
        from traincast.workload import llms, zoo

        return [dict(name=e.name, family=e.family, description=e.description)
                for e in [*zoo.ZOO.values(), *llms.entries()]]

    @r.get("/gpus", tags=["about"])
    def gpus():
        from traincast.hardware import get_catalog

        cat = get_catalog()
        priced = {i.device.name for i in cat.instances.values() if i.usd_per_hour is not None}
        return [dict(name=d.name, kind=d.kind, generation=d.generation, memory_gib=d.memory_gib,
                     priced=d.name in priced) for d in cat.devices.values()]

    # ---------------------------------------------------- forecast / plan
    @r.post("/forecast", tags=["forecast"],
            summary="`traincast predict --json`: time, cost and memory of one training job")
    def forecast(request: Request, body: ForecastRequest):
        return _json(request.app.state.compute.forecast_json(body))

    @r.post("/plan", tags=["forecast"],
            summary="`traincast plan --json`: every (instance x count), the Pareto front of time and cost")
    def plan(request: Request, body: PlanRequest):
        return _json(request.app.state.compute.plan_json(body))

    @r.post("/compare", tags=["forecast"], summary="one model on several GPUs: `predict --json` for each")
    def compare(request: Request, body: CompareRequest):
        return _json(request.app.state.compute.compare_json(body))

    @r.post("/parallelize", tags=["forecast"],
            summary="`traincast parallelize --json`: every valid parallel layout, the fastest that fit")
    def parallelize(request: Request, body: ParallelizeRequest):
        return _json(request.app.state.compute.parallelize_json(body))

    # --------------------------------------------------------------- jobs
    @r.get("/jobs", tags=["jobs"], summary="`traincast jobs --json`, with each job's remaining time, band and cost")
    def jobs_list(request: Request):
        return request.app.state.jobs_view.summaries()

    @r.get("/jobs/{job}", tags=["jobs"])
    def job_get(request: Request, job: JobName):
        from traincast.online import jobs as J

        info = J.get_job(_store(request), job)
        jid = J.job_id(_store(request), job)
        return {**dataclasses.asdict(info), "last_step": J.last_step(_store(request), jid)}

    @r.put("/jobs/{job}", tags=["jobs"], dependencies=[Depends(require_token)], summary="create or update a job")
    def job_put(request: Request, job: JobName, meta: JobMeta):
        from traincast.online import jobs as J

        J.upsert_job(_store(request), job, **meta.model_dump())
        return job_get(request, job)

    @r.delete("/jobs/{job}", tags=["jobs"], dependencies=[Depends(require_token)])
    def job_delete(request: Request, job: JobName):
        from traincast.online import jobs as J

        J.delete_job(_store(request), job)
        return {"deleted": job}

    metrics_schema = {"oneOf": [
        {"$ref": "#/components/schemas/MetricRow"},
        {"type": "array", "items": {"$ref": "#/components/schemas/MetricRow"}},
        {"$ref": "#/components/schemas/MetricBatch"},
    ]}

    @r.post("/jobs/{job}/metrics", tags=["jobs"], dependencies=[Depends(require_token)],
            summary="record steps: one row {step, time, loss, ...}, a list of rows, or {meta, rows, events}",
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": metrics_schema}}}})
    async def metrics(request: Request, job: JobName):
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise RequestValidationError([{"loc": ("body",), "msg": "the body is not JSON", "type": "json_invalid"}])
        try:
            if isinstance(body, list):
                batch = MetricBatch(rows=TypeAdapter(list[MetricRow]).validate_python(body))
            elif isinstance(body, dict) and ({"rows", "events", "meta"} & set(body)):
                batch = MetricBatch.model_validate(body)
            else:
                batch = MetricBatch(rows=[MetricRow.model_validate(body)])
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)])
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(_record, request, job, batch)

    def _record(request: Request, job: str, batch: MetricBatch):
        from traincast.online import jobs as J
        from traincast.online.records import Event

        rows = [r.model_dump() for r in batch.rows]
        events = [Event(e.kind, e.step, e.time_s, e.value) for e in batch.events]
        meta = batch.meta.model_dump(exclude_none=True) if batch.meta else None
        _, n, m = J.record_batch(_store(request), job, rows, events, meta)
        return {"job": job, "rows": n, "events": m}

    @r.get("/jobs/{job}/eta", tags=["jobs"], summary="`traincast eta JOB --json`, and the rows seen")
    def eta(request: Request, job: JobName,
            total_steps: Annotated[int | None, Query(gt=0)] = None,
            estimator: str | None = None):
        from traincast.online import estimate

        if estimator is not None and estimator not in estimate.ESTIMATORS:
            raise RequestValidationError([{"loc": ("query", "estimator"), "type": "value_error",
                                           "msg": f"unknown estimator {estimator!r}; known: {', '.join(estimate.ESTIMATORS)}"}])
        return request.app.state.jobs_view.eta(job, total_steps, estimator)

    @r.get("/jobs/{job}/converge", tags=["jobs"], summary="`traincast converge JOB --target-loss X --json`")
    def converge(request: Request, job: JobName,
                 target_loss: Annotated[float, Query(allow_inf_nan=False)],
                 form: str = "auto", draws: Annotated[int, Query(ge=10, le=1000)] = 120,
                 lr_schedule: str | None = None, total_steps: Annotated[int, Query(ge=1)] | None = None):
        from traincast.online import api, jobs as J

        return api.converge_report(J.load_series(_store(request), job), target_loss, lr_schedule=lr_schedule,
                                   total_steps=total_steps, form=form, n_draws=draws, target=job)

    @r.get("/jobs/{job}/curve", tags=["jobs"], summary="the loss curve (at most max_points) and its fitted model")
    def curve(request: Request, job: JobName, max_points: Annotated[int, Query(ge=10, le=5000)] = 400):
        return request.app.state.jobs_view.curve(job, max_points)

    return r


def create_app(settings: ServeSettings | None = None, store=None) -> FastAPI:
    """The traincast server. ``store``: an open Store (default: ``Store(settings.db)``)."""
    from traincast.serve.jobs_view import JobsView
    from traincast.serve.ui import ui_router
    from traincast.store import Store

    settings = settings or ServeSettings()
    app = FastAPI(title="traincast", version=__version__, docs_url=None,
                  description="Forecast the time and cost of training deep-learning models; watch running jobs. "
                              "Writes need `Authorization: Bearer <token>`.")
    # Swagger UI 4 (the swagger-ui-bundle package: served from here, no CDN) reads OpenAPI 3.0 documents
    app.openapi_version = "3.0.3"
    app.state.settings = settings
    app.state.store = store if store is not None else Store(settings.db, pool_size=settings.pool_size)
    app.state.compute = Compute(settings.cache_size, settings.uploads_dir, settings.compute_wait_s)
    app.state.jobs_view = JobsView(app.state.store)
    app.state.started_s = time.time()
    app.add_middleware(LimitsMiddleware, settings=settings)

    @app.exception_handler(TraincastError)
    async def _traincast_error(request: Request, exc: TraincastError):
        if isinstance(exc, UnknownNameError) and exc.kind == "job":
            return JSONResponse({"detail": str(exc)}, status_code=404)
        return _error_422(exc)

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy):
        return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "30"})

    app.include_router(api_router())
    app.include_router(ui_router())

    @app.get("/static/plotly.min.js", include_in_schema=False)
    def plotly_js():  # plotly's own bundle, from the installed Python package: no CDN, works offline
        import plotly

        return FileResponse(Path(plotly.__file__).parent / "package_data" / "plotly.min.js",
                            media_type="application/javascript", headers={"Cache-Control": "max-age=86400"})

    @app.get("/docs", include_in_schema=False)
    def docs():
        from fastapi.openapi.docs import get_swagger_ui_html

        return get_swagger_ui_html(openapi_url="/openapi.json", title="traincast API",
                                   swagger_js_url="/static/swagger/swagger-ui-bundle.js",
                                   swagger_css_url="/static/swagger/swagger-ui.css",
                                   swagger_favicon_url="/static/swagger/favicon-32x32.png")

    @app.get("/static/swagger/{name}", include_in_schema=False)
    def swagger_static(name: str):
        from swagger_ui_bundle import swagger_ui_path

        path = Path(swagger_ui_path) / name
        if "/" in name or name.startswith(".") or not path.is_file():
            raise HTTPException(404, "no such file")
        return FileResponse(path, headers={"Cache-Control": "max-age=86400"})

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str):
        path = HERE / "static" / name
        if "/" in name or name.startswith(".") or not path.is_file():
            raise HTTPException(404, "no such file")
        return FileResponse(path)

    return app
