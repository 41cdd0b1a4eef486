"""The web UI in a real headless Chromium (Debian's, driven by Playwright): the plan form gives a plot, a
table and a forecast; an uploaded Hugging Face config plans; the jobs dashboard follows metrics as they are
posted; the compare page plots; the pages fit a phone. Screenshots go to the test's tmp folder (and to
$TRAINCAST_SCREENSHOTS when set)."""

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest

from traincast.serve.runner import ServerProcess

TOKEN = "browser-token-" + "b" * 20
CHROMIUM = os.environ.get("TRAINCAST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("srv")
    with ServerProcess(d / "srv.db", TOKEN, home=d / "home", log=d / "serve.log",
                       args=("--rate-limit", "0", "--compute-per-min", "0")) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `make test` installs Debian's chromium"
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh --user-data-dir
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True, args=ARGS,
                                                   viewport={"width": 1280, "height": 900})
        yield ctx
        ctx.close()


@pytest.fixture
def page(browser):
    pg = browser.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.console_errors = errors  # a test that provokes an error answer removes what it expects
    yield pg
    pg.close()
    assert errors == [], errors


def shot(page, tmp_path, name):
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    out = os.environ.get("TRAINCAST_SCREENSHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(out) / path.name)
    assert path.stat().st_size > 10_000
    return path


def post(server, job, body):
    req = urllib.request.Request(f"{server.url}/api/v1/jobs/{job}/metrics", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json",
                                                         "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_plan_explorer_plots_lists_and_forecasts(server, page, tmp_path):
    page.goto(server.url + "/")
    page.select_option("#model", "resnet18")
    page.fill("input[name=batch_size]", "256")
    page.fill("input[name=epochs]", "10")
    page.fill("input[name=gpus]", "1,2,4,8")
    page.fill("input[name=deadline]", "2h")
    for box in page.query_selector_all("input[name=gpu_types]"):
        box.set_checked(box.get_attribute("value") in ("T4", "A100-SXM4-80GB", "H100-SXM5-80GB"))
    page.click("#plan-go")
    page.wait_for_selector("#plan-plot .main-svg", timeout=120_000)
    rows = page.query_selector_all("#plan-table tr.clickable")
    assert len(rows) >= 6
    assert page.locator("#plan-plot .scatterlayer .trace").count() >= 3  # infeasible, feasible, front, line
    assert "front" in page.inner_text("#plan-plot")  # the legend
    text = page.inner_text("#plan-table")
    assert "T4" in text and "H100-SXM5-80GB" in text and "misses the deadline" in text
    assert "wall clock (goodput)" in text and "%)" in text  # judged by the wall clock with failures
    rows[0].click()
    page.wait_for_selector("#forecast-table tr", timeout=60_000)
    assert "iteration" in page.inner_text("#forecast-table")
    assert "wall clock with failures" in page.inner_text("#forecast-table")
    assert "MFU" in page.inner_text("#forecast-table")
    assert page.inner_text("#forecast-title").startswith("resnet18 on")
    page.wait_for_selector("#forecast-plot .main-svg")
    shot(page, tmp_path, "plan")


def test_an_uploaded_hugging_face_config_plans(server, page, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 2, "n_positions": 128,
                               "vocab_size": 1000}))
    page.goto(server.url + "/")
    page.set_input_files("#hf_config", str(cfg))
    page.fill("input[name=batch_size]", "32")
    page.fill("input[name=epochs]", "1")
    page.fill("input[name=dataset_size]", "10000")
    page.fill("input[name=gpus]", "1,2")
    page.click("#plan-go")
    page.wait_for_selector("#plan-table tr.clickable", timeout=120_000)
    assert "configurations" in page.inner_text("#status")
    page.set_input_files("#hf_config", [])
    bad = tmp_path / "bad.json"
    bad.write_text('{"n_embd": 3}')
    page.set_input_files("#hf_config", str(bad))
    page.click("#plan-go")
    page.wait_for_selector("#status.error")
    assert "model_type" in page.inner_text("#status")
    page.console_errors.remove("Failed to load resource: the server responded with a status of 422 "
                               "(Unprocessable Entity)")


def test_jobs_dashboard_follows_posted_metrics(server, page, tmp_path):
    t0 = 1_700_000_000.0
    post(server, "live-run", {"meta": {"total_steps": 1000, "model": "resnet50", "hardware": "8xA100",
                                       "price_usd_per_hour": 32.8},
                              "rows": [{"step": s, "time": t0 + s, "loss": 3.0 / (1 + s / 50)} for s in range(0, 101)]})
    page.goto(server.url + "/jobs")
    page.wait_for_selector("#jobs-table tr[data-job='live-run']", timeout=30_000)
    row = page.locator("#jobs-table tr[data-job='live-run']")
    assert "100 / 1,000" in row.inner_text() and "10.0%" in row.inner_text()
    first = row.locator("td.remaining").inner_text()
    page.wait_for_selector("#loss-plot .main-svg", timeout=30_000)
    post(server, "live-run", [{"step": s, "time": t0 + s, "loss": 3.0 / (1 + s / 50)} for s in range(101, 501)])
    page.wait_for_function("document.querySelector(\"#jobs-table tr[data-job='live-run']\").innerText"
                           ".includes('500 / 1,000')", timeout=30_000)
    row = page.locator("#jobs-table tr[data-job='live-run']")
    assert "50.0%" in row.inner_text() and row.locator("td.remaining").inner_text() != first
    assert "$" in row.inner_text()  # cost so far and to go
    # the loss curve follows too: its last point is the last step posted, and the fit is drawn beside it
    page.wait_for_function("(() => { const d = document.getElementById('loss-plot').data;"
                           " return d && d[0].x[d[0].x.length - 1] === 500; })()", timeout=30_000)
    assert page.locator("#loss-plot .scatterlayer .trace").count() == 2  # the loss and its fit
    shot(page, tmp_path, "jobs")


def test_compare_page(server, page, tmp_path):
    page.goto(server.url + "/compare")
    page.select_option("#model", "resnet18")
    page.fill("input[name=batch_size]", "128")
    page.click("#compare-go")
    page.wait_for_selector("#compare-plot .main-svg", timeout=120_000)
    assert page.locator("#compare-table tr").count() >= 4
    assert page.locator("#compare-plot .barlayer .trace").count() == 2  # time and cost
    # the two bars of one GPU stand side by side, not over each other (two y axes: one offset group each)
    xs = page.evaluate("Array.from(document.querySelectorAll('#compare-plot .barlayer .trace')).map("
                       "t => t.querySelector('.point path').getBBox().x)")
    assert xs[0] != xs[1]
    shot(page, tmp_path, "compare")


def test_pages_fit_a_phone(server, browser, tmp_path):
    page = browser.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        for path in ("/", "/jobs", "/compare"):
            page.goto(server.url + path)
            page.wait_for_load_state("networkidle")
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), path
        page.goto(server.url + "/")
        shot(page, tmp_path, "phone-plan")
    finally:
        page.close()


def test_api_docs_render_offline(server, page):
    page.goto(server.url + "/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=30_000)
    assert "/api/v1/forecast" in page.inner_text("body")
