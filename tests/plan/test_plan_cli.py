import json

import pytest
import typer

from traincast.cli.main import run
from traincast.cli.plan import register


def _app():
    app = typer.Typer()
    register(app)

    @app.callback()
    def _main():  # keep `simulate` a sub-command
        pass

    return app


def test_simulate_json_and_plot(tmp_path, capsys, make_doc, dump_yaml):
    path = dump_yaml(tmp_path / "tiny.yaml", make_doc())
    png = tmp_path / "out" / "cmp.png"
    code = run(["simulate", "--scenario", str(path), "--policy", "fifo,edf,milp",
                "--replications", "2", "--seed", "3", "--json", "--plot", str(png)], the_app=_app())
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"fifo", "edf", "milp"}
    assert out["policies"]["edf"]["cost_usd"]["mean"] > 0
    assert "edf" in out["improvement_of_milp"]
    assert len(out["runs"]) == 6
    assert png.exists() and png.stat().st_size > 1000


def test_simulate_table(tmp_path, capsys, make_doc, dump_yaml):
    path = dump_yaml(tmp_path / "tiny.yaml", make_doc())
    code = run(["simulate", "-s", str(path), "-p", "edf,priority", "-r", "1"], the_app=_app())
    assert code == 0
    out = capsys.readouterr().out
    assert "edf" in out and "priority" in out


@pytest.mark.parametrize("over", [
    {"vm_types": [{"name": "NC999"}]},
    {"job_classes": [{"name": "X", "model": "nosuchnet", "dataset_size": 1, "epochs": 1, "batch_size": 1}]},
    {"arrivals": {"mean_interarrival_s": -30}},
    {"jobs": [{"class": "A", "arrival_s": 100, "deadline_s": 10}]},
])
def test_bad_scenario_files_exit_2(tmp_path, capsys, make_doc, dump_yaml, over):
    path = dump_yaml(tmp_path / "bad.yaml", make_doc(**over))
    code = run(["simulate", "--scenario", str(path), "--policy", "edf"], the_app=_app())
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


@pytest.mark.parametrize("args", [
    ["--scenario", "nosuch"], ["--policy", "lifo"], ["--replications", "0"], ["--nodes", "0"],
    ["--interarrival", "-1"],
])
def test_bad_options_exit_2(args, capsys):
    code = run(["simulate", *args, "--jobs", "5"], the_app=_app())
    assert code == 2
    assert "error:" in capsys.readouterr().err
