"""The HTTP API in-process (FastAPI's TestClient): the answers are the CLI's, writes need a token,
bad bodies are 422 naming the field, limits hold."""

import json

import pytest

from traincast.cli.main import run
from traincast.online import track
from traincast.store import Store

from .conftest import TOKEN, make_client


def cli_json(app, capsys, *args):
    capsys.readouterr()
    code = run(list(args), the_app=app)
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_forecast_is_exactly_predict_json_and_a_repeat_comes_from_the_cache(client, cli_app, capsys):
    body = {"model": "resnet18", "gpu": "V100", "gpus": 4, "batch_size": 128, "epochs": 2, "dataset_size": 50_000,
            "precision": "amp-fp16", "optimizer": "adam"}
    r = client.post("/api/v1/forecast", json=body)
    assert r.status_code == 200, r.text
    want = cli_json(cli_app, capsys, "predict", "resnet18", "--gpu", "V100", "--gpus", "4", "--batch-size", "128",
                    "--epochs", "2", "--dataset-size", "50000", "--precision", "amp-fp16", "--optimizer", "adam",
                    "--json")
    assert r.json() == want
    compute = client.app.state.compute
    hits = compute.answers.hits
    again = client.post("/api/v1/forecast", json=body)
    assert again.json() == want and compute.answers.hits == hits + 1
    # the same model on other hardware reuses the trace (one family per model configuration)
    n_fam = len(compute.families.d)
    assert client.post("/api/v1/forecast", json={**body, "gpu": "A100", "gpus": 2}).status_code == 200
    assert len(compute.families.d) == n_fam


def test_plan_is_exactly_plan_json(client, cli_app, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = {"model": "mnist-cnn", "epochs": 3, "batch_size": 64, "gpus": "1,2,4", "gpu_types": ["T4", "V100"],
            "deadline": "2h", "budget": 5}
    r = client.post("/api/v1/plan", json=body)
    assert r.status_code == 200, r.text
    want = cli_json(cli_app, capsys, "plan", "mnist-cnn", "--epochs", "3", "--batch-size", "64", "--gpus", "1,2,4",
                    "--gpu-types", "T4,V100", "--deadline", "2h", "--budget", "5", "--plot", "", "--json")
    assert r.json() == want
    assert want["pareto_front"] and want["deadline_s"] == 7200


def test_compare_gives_one_forecast_per_gpu_and_names_a_bad_one(client):
    r = client.post("/api/v1/compare", json={"model": "resnet18", "gpu_types": "T4,A100,H100", "gpus": 2,
                                             "batch_size": 64})
    assert r.status_code == 200, r.text
    got = {x["gpu"]: x for x in r.json()}
    assert got["A100"]["forecast"]["device"].startswith("A100")
    assert got["H100"]["forecast"]["iteration_s"] < got["T4"]["forecast"]["iteration_s"]
    r = client.post("/api/v1/compare", json={"model": "resnet18", "gpu_types": ["T4", "Z9000"], "batch_size": 64})
    assert "unknown GPU 'Z9000'" in [x for x in r.json() if x["gpu"] == "Z9000"][0]["error"]


def test_a_timm_model_by_name_is_forecast_as_the_cli_does(client, cli_app, capsys):
    body = {"model": "timm:resnet18", "gpu": "A100", "batch_size": 16}
    r = client.post("/api/v1/forecast", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json(cli_app, capsys, "predict", "timm:resnet18", "--gpu", "A100", "--batch-size", "16",
                                "--json")


def test_a_named_language_model_by_hub_id_with_its_tokens_is_forecast_as_the_cli_does(client, cli_app, capsys):
    body = {"model": "Qwen/Qwen2.5-7B", "gpu": "H100", "gpus": 2, "batch_size": 2, "seq_len": 128,
            "precision": "amp-bf16", "optimizer": "adamw", "fsdp": "full", "micro_batch": 1, "tokens": 1e9}
    r = client.post("/api/v1/forecast", json=body)
    assert r.status_code == 200, r.text
    want = cli_json(cli_app, capsys, "predict", "Qwen/Qwen2.5-7B", "--gpu", "H100", "--gpus", "2", "-b", "2",
                    "--seq-len", "128", "--precision", "amp-bf16", "--optimizer", "adamw", "--fsdp", "full",
                    "--micro-batch", "1", "--tokens", "1B", "--json")
    assert r.json() == want and want["tokens_per_sample"] == 128 and want["dataset_size"] == 7812500
    assert any(m["name"] == "qwen2.5-7b" for m in client.get("/api/v1/models").json())
    bad = client.post("/api/v1/forecast", json={**body, "steps": 10})
    assert bad.status_code == 422 and "--steps is the whole job's length" in bad.text


def test_an_uploaded_hugging_face_config_is_traced_from_a_file_of_the_server(client, tmp_path):
    cfg = {"model_type": "gpt2", "n_embd": 128, "n_head": 4, "n_layer": 2, "n_positions": 64, "vocab_size": 500}
    r = client.post("/api/v1/forecast", json={"hf_config": cfg, "gpu": "T4", "batch_size": 8, "dataset_size": 800})
    assert r.status_code == 200, r.text
    assert r.json()["steps_per_epoch"] == 100 and r.json()["parameters"] > 0
    saved = list((tmp_path / "uploads").glob("gpt2-*/config.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text()) == cfg
    r = client.post("/api/v1/forecast", json={"hf_config": {"n_embd": 3}, "gpu": "T4", "batch_size": 8})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "hf_config"]


def test_kernel_modes_context_parallelism_and_recomputation_through_the_service(client, cli_app, capsys):
    """The options of issue 22 and the kernel modes reach the forecast as the CLI's flags do."""
    body = {"model": "gpt2", "gpu": "H100", "gpus": 4, "batch_size": 4, "seq_len": 1024, "precision": "amp-bf16",
            "optimizer": "adamw", "cp": 2, "fsdp": "full", "micro_batch": 1, "recompute": "selective-op",
            "kernels": "transformer-engine"}
    r = client.post("/api/v1/forecast", json=body)
    assert r.status_code == 200, r.text
    want = cli_json(cli_app, capsys, "predict", "gpt2", "--gpu", "H100", "--gpus", "4", "-b", "4", "--seq-len", "1024",
                    "--precision", "amp-bf16", "--optimizer", "adamw", "--cp", "2", "--fsdp", "full",
                    "--micro-batch", "1", "--recompute", "selective-op", "--kernels", "transformer-engine", "--json")
    got = r.json()
    assert got == want and got["strategy"]["cp"] == 2 and got["strategy"]["recompute"] == "selective-op"
    assert any("cudnn" in n for n in got["notes"])
    eager = client.post("/api/v1/forecast", json={**body, "kernels": "eager"}).json()
    assert eager["iteration_s"] > got["iteration_s"]
    body_ring = {**body, "kernels": "eager", "cp_rotate": "alltoall", "kv_repeat": True}
    ring = client.post("/api/v1/forecast", json=body_ring).json()
    want_ring = cli_json(cli_app, capsys, "predict", "gpt2", "--gpu", "H100", "--gpus", "4", "-b", "4", "--seq-len",
                         "1024", "--precision", "amp-bf16", "--optimizer", "adamw", "--cp", "2", "--fsdp", "full",
                         "--micro-batch", "1", "--recompute", "selective-op", "--cp-rotate", "alltoall",
                         "--kv-repeat", "--json")
    assert ring == want_ring and ring["strategy"]["cp_rotate"] == "alltoall" and ring["strategy"]["kv_repeat"]
    bad = client.post("/api/v1/forecast", json={**body, "kernels": "inductor"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "kernels"
    from typing import get_args

    from traincast.serve.models import KernelMode
    from traincast.workload.fusion import KERNEL_MODES

    assert set(get_args(KernelMode)) == set(KERNEL_MODES)


@pytest.mark.parametrize("body, field, words", [
    ({"model": "resnet50", "gpu": "V100"}, "batch_size", "Field required"),
    ({"model": "resnet50", "gpu": "V100", "batch_size": 0}, "batch_size", "greater than 0"),
    ({"model": "resnet50", "gpu": "V100", "batch_size": 8, "catalog": ["/etc/x.yaml"]}, "catalog", "not permitted"),
    ({"model": "/etc/passwd", "gpu": "V100", "batch_size": 8}, "model", "never reads files"),
    ({"model": "examples/mnist_cnn.yaml", "gpu": "V100", "batch_size": 8}, "model", "never reads files"),
    ({"model": "os:system", "gpu": "V100", "batch_size": 8}, "model", "never reads files"),
    ({"model": "resnet5", "gpu": "V100", "batch_size": 8}, "model", "did you mean 'resnet50'"),
    ({"model": "timm:resnet5", "gpu": "V100", "batch_size": 8}, "model", "did you mean"),
    ({"model": "timm:../x", "gpu": "V100", "batch_size": 8}, "model", "unknown timm model"),
    ({"model": "resnet50", "gpu": "V1000", "batch_size": 8}, "gpu", "unknown GPU 'V1000'"),
    ({"model": "resnet50", "gpu": "V100", "batch_size": 8, "epochs": "many"}, "epochs", "valid number"),
    ({"model": "resnet50", "gpu": "V100", "batch_size": 8, "adaptation": "/tmp/a.json"}, "adaptation", "'none' or 'auto'"),
    ({"gpu": "V100", "batch_size": 8}, None, "give model"),
])
def test_malformed_forecast_bodies_are_422_naming_the_field(client, body, field, words):
    r = client.post("/api/v1/forecast", json=body)
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    if field is not None:
        assert d["loc"][-1] == field
    assert words in d["msg"]


def test_a_body_that_is_not_json_is_422(client, auth):
    r = client.post("/api/v1/forecast", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    r = client.post("/api/v1/jobs/j/metrics", content=b"[1, 2", headers={**auth, "Content-Type": "application/json"})
    assert r.status_code == 422 and "not JSON" in r.json()["detail"][0]["msg"]


# --------------------------------------------------------------------------------------------- jobs
def test_writes_need_the_token(client, auth):
    row = {"step": 1, "time": 100.0, "loss": 2.0}
    r = client.post("/api/v1/jobs/j/metrics", json=row)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = client.post("/api/v1/jobs/j/metrics", json=row, headers={"Authorization": "Bearer " + "y" * len(TOKEN)})
    assert r.status_code == 401
    r = client.post("/api/v1/jobs/j/metrics", json=row, headers={"Authorization": f"Basic {TOKEN}"})
    assert r.status_code == 401
    assert client.put("/api/v1/jobs/j", json={"total_steps": 10}).status_code == 401
    assert client.delete("/api/v1/jobs/j").status_code == 401
    assert client.get("/api/v1/jobs").json() == []  # nothing was written
    assert client.post("/api/v1/jobs/j/metrics", json=row, headers=auth).json() == {"job": "j", "rows": 1, "events": 0}


def test_metrics_one_row_a_list_or_a_batch(client, auth):
    p = "/api/v1/jobs/run-1/metrics"
    assert client.post(p, json={"step": 0, "time": 1000.0}, headers=auth).status_code == 200
    assert client.post(p, json=[{"step": i, "time_s": 1000.0 + i, "loss": 1 / i} for i in range(1, 50)],
                       headers=auth).json()["rows"] == 49
    r = client.post(p, headers=auth, json={"meta": {"total_steps": 100, "model": "resnet18", "price_usd_per_hour": 3.6},
                                           "rows": [{"step": 50, "time": 1050.0, "loss": 0.02}],
                                           "events": [{"kind": "epoch_end", "step": 50, "time": 1050.5}]})
    assert r.json() == {"job": "run-1", "rows": 1, "events": 1}
    # a resent batch (its answer lost) changes nothing
    client.post(p, headers=auth, json={"rows": [{"step": 50, "time": 1050.0}],
                                       "events": [{"kind": "epoch_end", "step": 50, "time": 1050.5}]})
    # a loss attached after the step keeps the step's time
    client.post(p, headers=auth, json={"step": 50, "loss": 0.019})
    (job,) = client.get("/api/v1/jobs").json()
    assert (job["name"], job["records"], job["last_step"], job["total_steps"], job["progress"]) == \
        ("run-1", 51, 50, 100, 0.5)
    assert job["remaining_s"] == pytest.approx(50.0, rel=0.05)  # one step a second
    assert job["cost_so_far_usd"] == pytest.approx(50 / 3600 * 3.6, rel=0.05)
    assert job["cost_to_go_usd"] == pytest.approx(job["remaining_s"] / 3600 * 3.6)
    assert job["low_s"] <= job["remaining_s"] <= job["high_s"] and job["last_loss"] == 0.019
    one = client.get("/api/v1/jobs/run-1").json()
    assert one["last_step"] == 50 and one["model"] == "resnet18"
    curve = client.get("/api/v1/jobs/run-1/curve").json()
    assert curve["steps"][0] == 1 and curve["loss"][-1] == 0.019 and curve["fit"]["form"] in ("optimus", "power")
    assert curve["fit"]["steps"][-1] == 100  # drawn to the planned end
    with Store(client.app.state.settings.db) as s:
        n_ev = s.conn.execute("SELECT COUNT(*) FROM online_events").fetchone()[0]
        t50 = s.conn.execute("SELECT time_s FROM online_steps WHERE step=50").fetchone()[0]
    assert n_ev == 1 and t50 == 1050.0


@pytest.mark.parametrize("body, loc", [
    ({"time": 1.0}, ["body", "step"]),
    ({"step": -1}, ["body", "step"]),
    ([{"step": 1}, {"step": "two"}], ["body", 1, "step"]),
    ({"rows": [{"step": 1, "lost": 2.0}]}, ["body", "rows", 0, "lost"]),
    ({"events": [{"kind": "coffee", "step": 1}]}, ["body", "events", 0, "kind"]),
    ({"meta": {"total_steps": 0}}, ["body", "meta", "total_steps"]),
    ({"step": 1, "loss": "low"}, ["body", "loss"]),
])
def test_malformed_metrics_are_422_naming_the_field(client, auth, body, loc):
    r = client.post("/api/v1/jobs/j/metrics", json=body, headers=auth)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc
    assert client.get("/api/v1/jobs").json() == []  # the batch is refused whole


def test_eta_and_converge_are_the_cli_answers_plus_rows(client, cli_app, auth, capsys, tmp_path, monkeypatch):
    from traincast.online.synthetic import SyntheticJob

    j = SyntheticJob(total_steps=2000, step_s=0.1, steps_per_epoch=500, epoch_pause_s=3).generate(0).upto(900)
    rows = [{"step": int(s), "time": float(t), "loss": None if loss != loss else float(loss)}
            for s, t, loss in zip(j.steps, j.time_s, j.loss)]
    assert client.post("/api/v1/jobs/syn/metrics", headers=auth, json={"meta": {"total_steps": 2000}, "rows": rows,
                       "events": [{"kind": "epoch_end", "step": 500, "time": float(j.time_s[500])}]}).status_code == 200
    monkeypatch.setenv("TRAINCAST_DB", client.app.state.settings.db)
    got = client.get("/api/v1/jobs/syn/eta").json()
    want = cli_json(cli_app, capsys, "eta", "syn", "--json")
    assert got == {**want, "rows": len(rows)}
    assert client.get("/api/v1/jobs/syn/eta?total_steps=3000").json()["total_steps"] == 3000
    got = client.get("/api/v1/jobs/syn/converge?target_loss=0.5&draws=20").json()
    assert got == cli_json(cli_app, capsys, "converge", "syn", "--target-loss", "0.5", "--draws", "20", "--json")
    jobs = client.get("/api/v1/jobs").json()
    cli_jobs = cli_json(cli_app, capsys, "jobs", "--json")
    assert [{k: j[k] for k in c} for j, c in zip(jobs, cli_jobs)] == cli_jobs  # jobs --json's fields, and more


def test_reading_unknown_jobs_and_bad_queries(client, auth):
    client.post("/api/v1/jobs/alpha/metrics", json={"step": 1, "time": 1.0}, headers=auth)
    r = client.get("/api/v1/jobs/alpah/eta")
    assert r.status_code == 404 and "did you mean 'alpha'" in r.json()["detail"]
    assert client.get("/api/v1/jobs/alpha/eta?total_steps=0").json()["detail"][0]["loc"] == ["query", "total_steps"]
    r = client.get("/api/v1/jobs/alpha/eta?estimator=magic")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "estimator"]
    r = client.get("/api/v1/jobs/alpha/eta")
    assert r.status_code == 422 and "total number of steps is not known" in r.json()["detail"][0]["msg"]
    r = client.get("/api/v1/jobs/alpha/eta?total_steps=100")
    assert r.status_code == 422 and "timed step records" in r.json()["detail"][0]["msg"]
    assert client.get("/api/v1/jobs/alpha/converge").json()["detail"][0]["loc"] == ["query", "target_loss"]
    assert client.delete("/api/v1/jobs/alpha", headers=auth).json() == {"deleted": "alpha"}
    assert client.get("/api/v1/jobs").json() == []


def test_request_size_and_rate_limits(tmp_path, auth):
    c, app = make_client(tmp_path, max_body_bytes=4096, rate_per_s=5, burst=5, compute_per_min=60)
    with c:
        big = [{"step": i, "time": float(i)} for i in range(1000)]
        r = c.post("/api/v1/jobs/j/metrics", json=big, headers=auth)
        assert r.status_code == 413 and "limit of 4096" in r.json()["detail"]
        codes = [c.get("/api/v1/jobs").status_code for _ in range(8)]
        assert codes[:4] == [200] * 4 and codes[-1] == 429
        r = c.get("/api/v1/jobs")
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    app.state.store.close()


def test_a_private_server_wants_the_token_for_reads_too(tmp_path, auth):
    c, app = make_client(tmp_path, private=True)
    with c:
        assert c.get("/api/v1/jobs").status_code == 401
        assert c.get("/api/v1/jobs", headers=auth).status_code == 200
    app.state.store.close()


def test_pages_docs_and_static_files_are_served_from_the_package(client):
    for path, words in (("/", "Which hardware?"), ("/jobs", "Running jobs"), ("/compare", "across GPUs"),
                        ("/docs", "/static/swagger/swagger-ui-bundle.js")):
        r = client.get(path)
        assert r.status_code == 200 and words in r.text
    assert "resnet50" in client.get("/").text and "H100-SXM5-80GB" in client.get("/").text
    assert client.get("/static/plotly.min.js").content.startswith(b"/**")
    assert client.get("/static/swagger/swagger-ui-bundle.js").status_code == 200
    assert client.get("/static/app.js").status_code == 200
    for bad in ("/static/..%2Fapp.py", "/static/.hidden", "/static/nothing.js", "/static/swagger/..%2F..%2Fx"):
        assert client.get(bad).status_code == 404
    spec = client.get("/openapi.json").json()
    assert {"/api/v1/forecast", "/api/v1/plan", "/api/v1/jobs/{job}/metrics", "/api/v1/jobs/{job}/eta",
            "/api/v1/jobs/{job}/converge"} <= set(spec["paths"])


def test_serve_refuses_to_bind_beyond_loopback_without_a_flag_and_a_token(cli_app, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINCAST_HOME", str(tmp_path))
    monkeypatch.delenv("TRAINCAST_TOKEN", raising=False)
    monkeypatch.delenv("TRAINCAST_TOKEN_FILE", raising=False)
    assert run(["serve", "--host", "0.0.0.0"], the_app=cli_app) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert run(["serve", "--host", "0.0.0.0", "--allow-remote"], the_app=cli_app) == 2
    assert "needs a token" in capsys.readouterr().err
    monkeypatch.setenv("TRAINCAST_TOKEN", "short")
    assert run(["serve", "--host", "10.1.2.3", "--allow-remote"], the_app=cli_app) == 2
    assert "16 characters" in capsys.readouterr().err
    from traincast.cli.serve import serve_settings

    monkeypatch.delenv("TRAINCAST_TOKEN")
    settings, path = serve_settings("127.0.0.1", None, False, None, False, 50, 60, 1 << 20)  # loopback: a token is made
    assert path == tmp_path / "serve.token" and settings.tokens == (path.read_text().strip(),)
    assert oct(path.stat().st_mode & 0o777) == "0o600" and len(settings.tokens[0]) >= 32
    again, _ = serve_settings("::1", None, False, None, False, 50, 60, 1 << 20)
    assert again.tokens == settings.tokens


def test_the_recorder_posts_to_the_app(client, auth, tmp_path):
    """track(server=...) through the in-process app (the HTTP hop is tested against a real server elsewhere)."""
    from traincast.online.recorder import Client

    c = Client("http://testserver", TOKEN)

    def request(method, path, body=None, timeout_s=None):
        r = client.request(method, path, json=body, headers=auth)
        if r.status_code >= 400:
            from traincast.online.recorder import ServerError

            raise ServerError(r.status_code, r.text)
        return r.json()

    c.request = request
    import traincast.online.recorder as R

    orig = R.Client
    R.Client = lambda *a, **k: c
    try:
        with track("inproc", 30, server="http://testserver", spool=tmp_path / "spool.db", flush_every_s=0.05) as t:
            for i in range(30):
                t.step(loss=1 / (i + 1))
            assert t.flush(10)
    finally:
        R.Client = orig
    assert client.get("/api/v1/jobs/inproc").json()["last_step"] == 30


def test_parallel_layouts_through_the_service_are_the_cli_answers(client, cli_app, capsys):
    """A forecast with a parallel layout and POST /parallelize answer what `predict --tp ...` and
    `parallelize --json` print (less parallelize's own elapsed time)."""
    body = {"model": "gpt2", "gpu": "A100", "gpus": 4, "batch_size": 8, "seq_len": 128, "precision": "amp-bf16",
            "optimizer": "adamw", "tp": 2, "micro_batch": 2}
    r = client.post("/api/v1/forecast", json=body)
    assert r.status_code == 200, r.text
    want = cli_json(cli_app, capsys, "predict", "gpt2", "--gpu", "A100", "--gpus", "4", "-b", "8", "--seq-len", "128",
                    "--precision", "amp-bf16", "--optimizer", "adamw", "--tp", "2", "--micro-batch", "2", "--json")
    assert r.json() == want and want["strategy"]["tp"] == 2
    body = {"model": "gpt2", "gpu": "A100", "gpus": 4, "batch_size": 8, "seq_len": 128, "micro_batches": [1, 2],
            "recomputes": ["none"], "shardings": ["none", "zero1"], "top": 3}
    r = client.post("/api/v1/parallelize", json=body)
    assert r.status_code == 200, r.text
    want = cli_json(cli_app, capsys, "parallelize", "gpt2", "--gpu", "A100", "--gpus", "4", "-b", "8", "--seq-len",
                    "128", "--micro-batches", "1,2", "--recompute", "none", "--shardings", "none,zero1", "--top", "3",
                    "--json")
    got = r.json()
    got.pop("elapsed_s"), want.pop("elapsed_s")
    assert got == want and len(got["top"]) <= 3
    bad = client.post("/api/v1/parallelize", json={**body, "gpus": 0})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "gpus"


def test_a_forecast_scaled_from_a_measured_step_is_predict_json(client, cli_app, capsys):
    body = {"model": "resnet18", "gpu": "H100", "batch_size": 32, "measured_step_ms": 40.0, "measured_on": "A100"}
    r = client.post("/api/v1/forecast", json=body)
    assert r.status_code == 200, r.text
    want = cli_json(cli_app, capsys, "predict", "resnet18", "--gpu", "H100", "--batch-size", "32",
                    "--measured-step-ms", "40", "--measured-on", "A100", "--json")
    assert r.json() == want and want["measured"]["device"] == "A100-SXM4-40GB"
    half = client.post("/api/v1/forecast", json={k: v for k, v in body.items() if k != "measured_on"})
    assert half.status_code == 422 and "go together" in half.text


def test_the_wall_clock_options_reach_the_forecast_as_the_clis_flags_do(client, cli_app, capsys):
    body = {"model": "gpt2", "gpu": "A100", "gpus": 8, "batch_size": 16, "seq_len": 64, "steps": 500_000,
            "gpu_mtbf_hours": 300, "restart_minutes": 5, "checkpoint_gb_per_s": 2}
    r = client.post("/api/v1/forecast", json=body)
    assert r.status_code == 200, r.text
    want = cli_json(cli_app, capsys, "predict", "gpt2", "--gpu", "A100", "--gpus", "8", "-b", "16", "--seq-len", "64",
                    "--steps", "500000", "--gpu-mtbf-hours", "300", "--restart-minutes", "5",
                    "--checkpoint-gb-per-s", "2", "--json")
    assert r.json() == want
    w = want["wall_clock"]
    assert w["job_mtbf_s"] == pytest.approx(300 * 3600 / 8)
    assert w["checkpoint_write_s"] == pytest.approx(w["checkpoint_bytes"] / 2e9)
    bad = client.post("/api/v1/forecast", json={**body, "gpu_mtbf_hours": 0})
    assert bad.status_code == 422 and "gpu_mtbf_hours" in bad.text
    plan_body = {"model": "mnist-cnn", "epochs": 3, "batch_size": 64, "gpus": "1,8", "gpu_types": ["V100"],
                 "gpu_mtbf_hours": 50, "restart_minutes": 30}
    r = client.post("/api/v1/plan", json=plan_body)
    assert r.status_code == 200, r.text
    want = cli_json(cli_app, capsys, "plan", "mnist-cnn", "--epochs", "3", "--batch-size", "64", "--gpus", "1,8",
                    "--gpu-types", "V100", "--gpu-mtbf-hours", "50", "--restart-minutes", "30", "--plot", "", "--json")
    assert r.json() == want
    assert all(c["wall_s"] > c["total_s"] for c in want["configurations"])


def test_a_plan_deadline_may_be_a_date_and_a_bad_one_is_named(client):
    import datetime as dt

    body = {"model": "mnist-cnn", "epochs": 1, "batch_size": 64, "gpus": "1", "gpu_types": ["T4"],
            "deadline": "2099-01-01"}
    r = client.post("/api/v1/plan", json=body)
    assert r.status_code == 200, r.text
    want = (dt.datetime(2099, 1, 2).astimezone() - dt.datetime.now().astimezone()).total_seconds()
    assert r.json()["deadline_s"] == pytest.approx(want, abs=120)
    for bad, msg in (("yesterday", "cannot read deadline"), ("2001-01-01", "already past")):
        r = client.post("/api/v1/plan", json={**body, "deadline": bad})
        assert r.status_code == 422 and msg in r.text and "deadline" in r.text
