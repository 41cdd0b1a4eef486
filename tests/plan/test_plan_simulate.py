import numpy as np
import pytest

from traincast.plan.durations import OptionTable, ScenarioDurations
from traincast.plan.policies import ClusterState, NodeState, RulePolicy, greedy_place, make_policy
from traincast.plan.scenario import Job, generate_jobs
from traincast.plan.simulate import compare, simulate


def _check_invariants(sc, jobs, res):
    """Each job ran once, after arrival, for its duration; no node over-filled."""
    assert res.n_jobs == len(jobs)
    assert sorted(r.job_id for r in res.jobs) == sorted(j.id for j in jobs)
    for r in res.jobs:
        assert r.start_s >= r.arrival_s - 1e-9 and r.end_s > r.start_s
    for node in range(sc.nodes):
        recs = [r for r in res.jobs if r.node == node]
        for t in {r.start_s for r in recs}:
            live = [r for r in recs if r.start_s <= t < r.end_s]
            vms = {r.vm for r in live}
            assert len(vms) <= 1
            if live:
                assert sum(r.gpus for r in live) <= sc.vm(live[0].vm).gpus


def test_edf_beats_fifo_on_tardiness_where_it_must(one_gpu):
    # one 1-GPU node; job 0 occupies it until t=100; job 1 (loose deadline) arrives
    # before job 2 (tight deadline). FIFO runs 1 then 2 (2 is 50 s late); EDF runs 2 first.
    sc, table = one_gpu([("X", 0, 500, 1.0), ("X", 1, 1000, 1.0), ("X", 2, 250, 1.0)], {"X": 100})
    fifo = simulate(sc, sc.jobs, make_policy("fifo"), table)
    edf = simulate(sc, sc.jobs, make_policy("edf"), table)
    assert fifo.total_tardiness_s == pytest.approx(50.0)
    assert fifo.deadline_misses == 1
    assert edf.total_tardiness_s == 0.0 and edf.deadline_misses == 0
    assert edf.cost_usd == pytest.approx(fifo.cost_usd) == pytest.approx(3.6 * 300 / 3600)
    ends = {r.job_id: r.end_s for r in edf.jobs}
    assert ends == {0: 100.0, 2: 200.0, 1: 300.0}


def test_priority_serves_the_heaviest_weight_first(one_gpu):
    sc, table = one_gpu([("X", 0, 100, 1.0), ("X", 1, 150, 1.0), ("X", 2, 400, 9.0)], {"X": 100})
    pr = simulate(sc, sc.jobs, make_policy("priority"), table)
    ends = {r.job_id: r.end_s for r in pr.jobs}
    assert ends[2] < ends[1]
    edf = simulate(sc, sc.jobs, make_policy("edf"), table)
    assert {r.job_id: r.end_s for r in edf.jobs}[1] < {r.job_id: r.end_s for r in edf.jobs}[2]


def test_rule_picks_cheapest_option_meeting_the_deadline(make_doc):
    from traincast.plan.scenario import parse_scenario

    tiny = parse_scenario(make_doc(vm_types=[
        {"name": "small", "gpu": "K80", "gpus": 1, "usd_per_hour": 1.0},
        {"name": "big", "gpu": "K80", "gpus": 2, "usd_per_hour": 2.0}]))
    table = OptionTable(tiny, ScenarioDurations(tiny, use_forecast=False))
    nodes = [NodeState(0), NodeState(1)]
    loose = Job(0, "A", 0.0, 10_000.0, 1.0)
    tight = Job(1, "A", 0.0, 3000.0, 1.0)
    st = ClusterState(0.0, [loose], nodes, table)
    (p,) = greedy_place(st, [loose], pack=False)
    assert (p.vm, p.gpus) == ("small", 1)  # $1.00 for 1 h beats $1.33 on big
    st = ClusterState(0.0, [tight], nodes, table)
    (p,) = greedy_place(st, [tight], pack=False)
    assert (p.vm, p.gpus) == ("big", 2)  # only 2 GPUs meet a 3000 s deadline


def test_packing_shares_a_vm_and_unpacked_rules_do_not(tiny):
    table = OptionTable(tiny, ScenarioDurations(tiny, use_forecast=False))
    big = tiny.vm("big")
    nodes = [NodeState(0, big, 1, 3600.0, 0.0, {9: (1, 3600.0)}), NodeState(1)]
    job = Job(0, "A", 0.0, 10_000.0, 1.0)
    st = ClusterState(0.0, [job], nodes, table)
    (p,) = greedy_place(st, [job], pack=True)
    assert p.node == 0 and p.gpus == 1  # free GPU on a VM that is up anyway: no extra cost
    (p,) = greedy_place(st, [job], pack=False)
    assert p.node == 1


@pytest.mark.parametrize("policy", ["fifo", "edf", "priority", "edf-pack", "milp"])
def test_simulation_invariants_and_costs(tiny, policy):
    table = OptionTable(tiny, ScenarioDurations(tiny, use_forecast=False))
    jobs = generate_jobs(tiny, table.reference_s, np.random.default_rng(1))
    res = simulate(tiny, jobs, make_policy(policy, time_limit_s=1.0) if policy == "milp"
                   else make_policy(policy), table)
    _check_invariants(tiny, jobs, res)
    assert res.cost_usd > 0 and 0 < res.utilisation <= 1 + 1e-9
    assert res.objective_usd == pytest.approx(res.cost_usd + res.tardiness_cost_usd)
    assert res.max_tardiness_s <= res.total_tardiness_s + 1e-9
    # cost = what was paid per node busy interval (a node is off when empty)
    paid = 0.0
    for node in range(tiny.nodes):
        recs = sorted((r for r in res.jobs if r.node == node), key=lambda r: r.start_s)
        end, start, vm = None, None, None
        for r in recs:
            if end is None or r.start_s >= end:
                if end is not None:
                    paid += tiny.vm(vm).usd_per_s * (end - start)
                start, end, vm = r.start_s, r.end_s, r.vm
            else:
                end = max(end, r.end_s)
        if end is not None:
            paid += tiny.vm(vm).usd_per_s * (end - start)
    assert res.cost_usd == pytest.approx(paid)


def test_compare_is_deterministic_with_a_seed(tiny):
    a = compare(tiny, ["fifo", "edf"], replications=3, seed=5, provider=ScenarioDurations(tiny, use_forecast=False))
    b = compare(tiny, ["fifo", "edf"], replications=3, seed=5, provider=ScenarioDurations(tiny, use_forecast=False))
    c = compare(tiny, ["fifo", "edf"], replications=3, seed=6, provider=ScenarioDurations(tiny, use_forecast=False))
    key = lambda cmp: [(r.policy, r.replication, r.cost_usd, r.total_tardiness_s) for r in cmp.runs]
    assert key(a) == key(b) and key(a) != key(c)
    s = a.summary("edf")
    vals = [r.cost_usd for r in a.runs if r.policy == "edf"]
    assert s.get("cost_usd").mean == pytest.approx(np.mean(vals))
    assert s.get("cost_usd").sd == pytest.approx(np.std(vals, ddof=1))


def test_unknown_policy_is_a_user_error():
    from traincast.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="did you mean"):
        make_policy("edff")
    assert isinstance(make_policy("EDF"), RulePolicy)
