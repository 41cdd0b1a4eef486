import torch
import torch.distributed as dist

from traincast.measure import save_ddp_timing, tiny_mlp_step, time_ddp


def test_ddp_two_processes_gloo(store):
    r = time_ddp("tiny-mlp", procs=2, batch_size=8, steps=3, warmup=1, step_factory=tiny_mlp_step, allreduce_repeats=3)
    assert r.backend == "gloo" and r.procs == 2 and r.threads_per_proc >= 1
    assert r.iteration.n_repeats == 3 and r.iteration.median_ms > 0
    n_params = (32 * 64 + 64) + (64 * 64 + 64) + (64 * 10 + 10)
    assert r.grad_bytes == 4 * n_params
    assert sum(r.bucket_bytes) == r.grad_bytes
    assert r.comm_hook_ms is not None and r.comm_hook_ms > 0
    assert r.allreduce is not None and r.allreduce.median_ms > 0
    assert len(r.per_rank_median_ms) == 2
    rid = save_ddp_timing(store.conn, r)
    row = store.conn.execute("SELECT procs, backend, grad_bytes FROM measure_ddp_timings WHERE id=?", (rid,)).fetchone()
    assert tuple(row) == (2, "gloo", r.grad_bytes)
    from traincast.measure import load_ddp_timings

    (loaded,) = load_ddp_timings(store.conn, procs=2)
    assert loaded["bucket_bytes"] == list(r.bucket_bytes) and loaded["detail"]["iteration"]["n_repeats"] == 3


def test_wrap_ddp_single_process_keeps_results(tmp_path):
    """The forward-patching wrapper trains exactly like the plain module (world size 1)."""
    from traincast.measure.ddp import wrap_ddp

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        a, b = tiny_mlp_step(batch_size=4), tiny_mlp_step(batch_size=4)
        ddp = wrap_ddp(a.modules[0])
        for _ in range(2):
            a.run()
            b.run()
        for pa, pb in zip(a.modules[0].parameters(), b.modules[0].parameters()):
            torch.testing.assert_close(pa, pb)
        assert sum(1 for _ in ddp.parameters()) == sum(1 for _ in a.modules[0].parameters())
    finally:
        dist.destroy_process_group()
