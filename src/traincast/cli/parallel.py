"""``traincast parallelize``: every valid layout of a job, the fastest that fit in memory."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from traincast.cli.commands import KERNELS_HELP, KV_REPEAT_HELP, MEMORY_FORMAT_HELP, SDPA_HELP, _parallel_names
from traincast.cli.render import console, dur, print_json, size, split_list, table

MODEL_HELP = ("the model: a zoo name, a Hugging Face config.json or a folder holding one, or a .yaml/.json layer "
              "spec (see `traincast models`)")


def register(app: typer.Typer) -> None:
    @app.command()
    def parallelize(
        model: str = typer.Argument(..., help=MODEL_HELP),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU name (see `traincast gpus`)"),
        gpus: int = typer.Option(..., "--gpus", help="GPUs in total"),
        nodes: Optional[int] = typer.Option(None, "--nodes", help="nodes the GPUs are spread over"),
        batch_size: int = typer.Option(..., "--batch-size", "-b", help="global batch (samples per step)"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", help="sequence length of transformer models"),
        precision: str = typer.Option("amp-bf16", "--precision"),
        optimizer: str = typer.Option("adamw", "--optimizer"),
        instance: Optional[str] = typer.Option(None, "--instance", help="cloud instance (see `traincast instances`)"),
        network: Optional[float] = typer.Option(None, "--network-gbit", help="inter-node network per node, Gb/s"),
        shardings: str = typer.Option("none,zero1,zero3", "--shardings",
                                      help="shardings to consider (none, zero1, zero2, zero3, fsdp-full, ...)"),
        recomputes: str = typer.Option("none,selective,selective-op,full", "--recompute", help="recomputations to consider"),
        micro_batches: str = typer.Option("1,2,4,8,16", "--micro-batches", help="micro-batch sizes to consider"),
        max_tp: Optional[int] = typer.Option(None, "--max-tp", help="largest tensor degree (default: GPUs per node)"),
        cps: Optional[str] = typer.Option(None, "--cp", help="context-parallel degrees to consider, e.g. 1,2,4,8 "
                                          "(default: 1, and powers of two up to a node for sequences >= 8K)"),
        cp_kinds: str = typer.Option("ring", "--cp-kinds", help="context parallelism to consider: ring, all-to-all"),
        cp_rotate: str = typer.Option("allgather", "--cp-rotate", help=_parallel_names("cp_rotate")),
        kv_repeat: bool = typer.Option(False, "--kv-repeat", help=KV_REPEAT_HELP),
        kernels: str = typer.Option("eager", "--kernels", help=KERNELS_HELP),
        sdpa: str = typer.Option("auto", "--sdpa", help=SDPA_HELP),
        memory_format: str = typer.Option("contiguous", "--memory-format", help=MEMORY_FORMAT_HELP),
        tp_comm_overlap: bool = typer.Option(False, "--tp-comm-overlap", help="layouts with sequence parallelism "
                                             "overlap its all-gathers and reduce-scatters with the GEMMs "
                                             "(Megatron-Core / Transformer Engine userbuffers)"),
        top: int = typer.Option(10, "--top", help="layouts to list"),
        catalog: Optional[list[Path]] = typer.Option(None, "--catalog", help="extra catalog YAML file(s)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output, with `best`"),
    ):
        """Every valid layout (tensor x pipeline x data degrees, ZeRO stage, micro-batch, recomputation, schedule):
        drop those that do not fit, list the fastest with memory and pipeline bubble."""
        from traincast.hardware import get_catalog
        from traincast.predict.parallel.search import parallelize as run
        from traincast.predict.parallel.strategy import RECOMPUTATIONS, SHARDINGS

        shs = tuple(SHARDINGS.canonical(x.lower()) for x in split_list(shardings, "--shardings"))
        rcs = tuple(RECOMPUTATIONS.canonical(x.lower()) for x in split_list(recomputes, "--recompute"))
        mbs = split_list(micro_batches, "--micro-batches", int)
        from traincast.errors import positive
        from traincast.predict.parallel.strategy import CONTEXT_PARALLEL

        ctx = tuple(split_list(cps, "--cp", int)) if cps else None
        kinds = tuple(CONTEXT_PARALLEL.canonical(x.lower()) for x in split_list(cp_kinds, "--cp-kinds"))
        for m in mbs:
            positive("--micro-batches entries", m)
        positive("--top", top)
        prog = task = None
        if console.is_terminal and not as_json:
            from rich.progress import Progress

            prog = Progress(transient=True, console=console)
            task = prog.add_task("layouts", total=None)
            prog.start()

        def progress(k, n):
            if prog is not None:
                prog.update(task, completed=k, total=n)
        try:
            res = run(model, gpu=gpu, gpus=gpus, nodes=nodes, batch_size=batch_size, seq_len=seq_len,
                      precision=precision, optimizer=optimizer, instance=instance, network_gbit_per_s=network,
                      catalog=get_catalog(catalog or ()), top=top, progress=progress, shardings=shs, recomputes=rcs,
                      micro_batches=mbs, max_tp=max_tp, context=ctx, cp_kinds=kinds, kernels=kernels,
                      memory_format=memory_format, sdpa=sdpa.strip().lower(),
                      tp_comm_overlap=tp_comm_overlap, cp_rotate=cp_rotate, kv_repeat=kv_repeat)
        finally:
            if prog is not None:
                prog.stop()
        if as_json:
            print_json(res.to_dict())
            return
        mfu = lambda c: "-" if res.mfu(c) is None else f"{100 * res.mfu(c):.1f}%"  # noqa: E731
        rows = [[k + 1, c.config.label(), dur(c.iteration_s), f"{c.samples_per_s:,.1f}", mfu(c),
                 f"{100 * c.bubble_share:.1f}%", dur(c.communication_exposed_s), size(c.peak_memory_bytes)]
                for k, c in enumerate(res.candidates)]
        console.print(table(f"{res.model} on {res.gpus}x {res.device}, global batch {res.global_batch}: the "
                            f"{len(res.candidates)} fastest of {res.considered} layouts ({res.out_of_memory} do not fit)",
                            ["#", "layout", "iteration", "samples/s", f"MFU ({res.peak_name})", "bubble",
                             "exposed comm", "memory/GPU"], rows, 2, compact=True))
        if res.best is not None:
            c = res.best
            console.print(f"best: {c.config.label()}: {dur(c.iteration_s)} per step, {size(c.peak_memory_bytes)} of "
                          f"{size(c.memory_capacity_bytes)} per GPU")
        for n in res.notes:
            console.print(f"[yellow]note:[/yellow] {n}")
        console.print(f"searched in {res.elapsed_s:.1f} s")
