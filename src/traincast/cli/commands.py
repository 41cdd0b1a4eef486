"""Forecasting commands: predict, trace, demo, models, gpus, instances."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from traincast.cli.render import console, count, dur, flops, print_json, size, split_list, table, usd
from traincast.errors import png_path

Catalogs = Optional[list[Path]]
KERNELS_HELP = ("eager (every op its own kernel, as eager PyTorch) | compiled (element-wise, cast, norm and reduction "
                "chains between GEMMs fused, the loss included, and the activations a compiler keeps: torch.compile, "
                "Megatron's fused kernels) | compiled-blocks (as compiled inside the repeated blocks only: "
                "torch.compile per transformer block, the loss eager) | transformer-engine (as compiled, with "
                "cuDNN's fused attention: Megatron-Core / NeMo)")
MEMORY_FORMAT_HELP = ("contiguous (PyTorch's default NCHW) | channels_last (NHWC: model.to(memory_format="
                      "torch.channels_last), as mixed-precision CNN recipes run; no layout transposes around "
                      "tensor-core convolutions, BF16 batch norms on PyTorch's channels-last kernels)")
SDPA_HELP = ("the fused attention kernel PyTorch's SDPA runs: auto (as current PyTorch picks by GPU: cuDNN's on "
             "Hopper and data-centre Blackwell, flash elsewhere) | flash (PyTorch before it preferred cuDNN's, or "
             "TORCH_CUDNN_SDPA_DEPRIORITIZED=1) | cudnn")
KV_REPEAT_HELP = ("the model repeats its K/V heads to the query heads before attention (torchtitan's Llama): a "
                  "ring moves and merges them so")
HF_TASK_HELP = ("the head of a Hugging Face model where its type has several: causal-lm | masked-lm | seq2seq | "
                "image-classification | contrastive | ctc | audio-classification | speech-seq2seq | "
                "image-text-to-text | sequence-classification | ... (one per transformers auto mapping; "
                "default: the config's architectures)")

IMAGE_SIZE_HELP = ("image side in pixels of a Hugging Face vision model or a torchvision segmentation, video, "
                   "optical-flow or quantized model (default: the config's image_size; torchvision: its recipe's "
                   "crop)")
NUM_FRAMES_HELP = ("frames per clip of a Hugging Face or torchvision video model (default: the config's "
                   "num_frames; torchvision: the clip length its Kinetics-400 weights document)")

MODEL_HELP = ("the model: a zoo name or any torchvision model (see `traincast models`), "
              "timm:NAME (any timm model), package.module:factory (your own nn.Module; see --input-shape), a "
              "diffusers config (JSON with _class_name), a Hugging Face config.json or a folder holding one, or a "
              ".yaml/.json layer spec")
INPUT_SHAPE_HELP = ("per-sample input shape of a package.module:factory model, e.g. 3,224,224 (several inputs: "
                    "'3,224,224;10'); default: the module's example_inputs(batch_size, device)")


def _inputs(input_shape):
    from traincast.workload.sources import parse_input_shape

    return parse_input_shape(input_shape)


def _names(kind: str) -> str:
    """``a | b | c`` of a registry, for an option's help."""
    if kind == "precision":
        from traincast.workload.precision import PRECISIONS

        return PRECISIONS.describe()
    if kind == "sync":
        from traincast.predict.comm import SYNC_METHODS

        return SYNC_METHODS.choices()
    if kind == "predictor":
        from traincast.predict.registry import PREDICTORS

        return PREDICTORS.describe()
    if kind == "optimizer":
        from traincast.workload.optimizers import OPTIMIZERS

        return OPTIMIZERS.choices()
    raise KeyError(kind)


def _parallel_names(kind: str) -> str:
    from traincast.predict.parallel.strategy import CONTEXT_PARALLEL, CP_ROTATIONS, RECOMPUTATIONS, SCHEDULES

    if kind == "cp_rotate":
        return "PyTorch's ring attention, how K/V go round (its _cp_options.rotate_method): " + CP_ROTATIONS.describe()
    if kind == "schedule":
        return SCHEDULES.describe()
    if kind == "cp_kind":
        return CONTEXT_PARALLEL.describe()
    return RECOMPUTATIONS.describe()


def _catalog(files):
    from traincast.hardware import get_catalog

    return get_catalog(files or ())


# the expected wall clock with failures, restarts and checkpoints (predict/goodput.py): predict's and plan's
GPU_MTBF_OPTION = typer.Option(None, "--gpu-mtbf-hours", help="GPU-hours between job-interrupting failures, per "
                               "GPU (default 50,677: Llama 3's 16,384 H100s) for the expected wall clock")
RESTART_OPTION = typer.Option(None, "--restart-minutes", help="from a failure to training again (default 10)")
CHECKPOINT_EVERY_OPTION = typer.Option(None, "--checkpoint-every", help="minutes of training between checkpoints "
                                       "(default: the interval that minimises the wall clock)")
CHECKPOINT_BW_OPTION = typer.Option(None, "--checkpoint-gb-per-s", help="the job's checkpoint write bandwidth, GB/s "
                                    "(default 0.122 per GPU)")


def render_forecast(f, console=console) -> None:
    title = (f"{f.model} on {f.gpus}x {f.device}" + (f" ({f.nodes} nodes)" if f.nodes > 1 else "")
             + (f", {f.instance}" if f.instance else "") + f", {f.precision}, {f.optimizer}")
    rows = [
        ["batch (global / per GPU)", f"{f.global_batch} / {f.per_gpu_batch}"],
        ["iteration", dur(f.iteration_s)],
        ["  forward", dur(f.forward_s)],
        ["  backward", dur(f.backward_s)],
        ["  optimizer", dur(f.optimizer_s)],
        ["  communication (exposed / total)", f"{dur(f.communication_s)} / {dur(f.communication_total_s)}"],
        ["  fixed per step", dur(f.overhead_s)],
    ] + ([["  waiting for the data loader", dur(f.input_wait_s)]] if f.input_wait_s > 0 else []) + [
        ["steps per epoch", "-" if f.steps_per_epoch is None else f"{f.steps_per_epoch:,}"],
    ] + ([["tokens (per step / in all)", f"{count(f.tokens_per_sample * f.global_batch)} / "
           + ("-" if f.steps_per_epoch is None else count(f.tokens_per_sample * f.global_batch * f.steps_per_epoch
                                                          * f.epochs))]] if f.tokens_per_sample else []) + [
        ["epoch", dur(f.epoch_s)],
        [f"total ({f.epochs:g} epochs)", dur(f.total_s)],
        ["price", usd(f.usd_per_hour) + ("/h" if f.usd_per_hour is not None else "")],
        ["cost", usd(f.cost_usd)],
    ] + _wall_clock_rows(f.wall_clock) + [
        ["FLOPs per step (fwd / bwd)", f"{flops(f.flops['forward'])} / {flops(f.flops['backward'])}"],
        ["model FLOP/s per GPU (MFU)", f"{f.model_tflops_per_gpu:,.1f} TFLOP/s"
         + (f" ({100 * f.mfu:.1f}% of the {f.model_peak_name} peak)" if f.mfu is not None else "")],
        ["parameters (trainable)", f"{count(f.parameters)} ({count(f.trainable_parameters)})"],
        ["peak memory per GPU", f"{size(f.peak_memory_bytes)} of {size(f.memory_capacity_bytes)} usable"
         + ("" if f.fits_in_memory else "  OUT OF MEMORY")],
        ["largest per-GPU batch that fits", str(f.max_per_gpu_batch)],
        ["bottleneck", f.bottleneck],
        ["predictor", f.predictor],
    ]
    if f.strategy:
        rows.insert(0, ["layout", f.strategy["label"] + f" ({f.strategy['micro_batches']} micro-batches)"])
        rows.insert(8, ["  pipeline bubble", f"{100 * f.bubble_share:.1f}% of the pipeline"])
        rows.insert(9, ["  waiting for the slowest GPU", dur(f.straggler_s)])
        rows[1][0] = "batch (global / per replica)"
        rows = [r for r in rows if r[0] != "largest per-GPU batch that fits"]
        rows.append(["largest micro-batch that fits", str(f.max_per_gpu_batch)])
    console.print(table(title, ["", ""], rows))
    if f.shares:
        labels = {"fp8_gemm": "FP8 GEMMs", "fp8_cast_amax": "FP8 casts, transposes, amax",
                  "cp_comm_exposed": "context-parallel comm, exposed", "cp_comm_hidden": "context-parallel comm, "
                  "hidden behind attention"}
        console.print(table("share of the step (busiest GPU)", ["", "time", "share"],
                            [[labels[k], dur(v["s"]), f"{100 * v['share']:.1f}%"] for k, v in f.shares.items()
                             if v["s"] > 0]))
    if f.strategy:
        _render_parallel(f, console)
        for n in f.notes:
            console.print(f"[yellow]note:[/yellow] {n}")
        return
    mods = [[m["module"], str(m.get("count", 1)), dur(m["time_s"]), f"{100 * m['share']:.1f}%", flops(m["flops"])]
            for m in f.top_modules]
    console.print(table("costliest modules (fwd+bwd; a repeated block's copies summed: *)",
                        ["module", "copies", "time", "share", "FLOPs"], mods))
    if len(f.scaling) > 1:
        rows = [[r.gpus, r.nodes, r.per_gpu_batch, dur(r.iteration_s), dur(r.communication_s),
                 f"{r.samples_per_s:,.0f}", dur(r.epoch_s), f"{r.speedup:.2f}x", f"{100 * r.efficiency:.0f}%"]
                for r in f.scaling]
        console.print(table("data-parallel scaling", ["GPUs", "nodes", "batch/GPU", "iteration", "comm",
                                                      "samples/s", "epoch", "speed-up", "efficiency"], rows))
    for n in f.notes:
        console.print(f"[yellow]note:[/yellow] {n}")


def _wall_clock_rows(w: dict | None) -> list[list[str]]:
    """The expected wall clock with failures, restarts and checkpoints (predict/goodput.py), as table rows: one
    row, and the details where at least one interruption is expected."""
    if not w:
        return []
    if w["wall_s"] is None:
        return [["wall clock with failures", f"never: the job is interrupted every {dur(w['job_mtbf_s'])}, "
                 "faster than it can restart and redo its work (--restart-minutes, --checkpoint-every)"]]
    rows = [["wall clock with failures", f"{dur(w['wall_s'])} (goodput {100 * w['goodput']:.1f}%)"]]
    if w["interruptions"] < 0.5:
        return rows
    if w["checkpoint_every_s"] >= w["training_s"]:
        ckpt = f"{size(w['checkpoint_bytes'])}: none written, the job is shorter than one interval"
    else:
        ckpt = (f"{size(w['checkpoint_bytes'])} every {dur(w['checkpoint_every_s'])} "
                f"({w['checkpoint_every_steps']:,} steps{'' if w['optimal_interval'] else ', as given'}), "
                f"{dur(w['checkpoint_write_s'])} to write")
    return rows + [
        ["  interruptions", f"{w['interruptions']:.1f} expected (one every {dur(w['job_mtbf_s'])})"],
        ["  restarts / lost work / checkpoints", f"{dur(w['restart_s'])} / {dur(w['lost_work_s'])} / "
         f"{dur(w['checkpoint_s'])}"],
        ["  checkpoint", ckpt],
        ["cost with failures", usd(w["cost_usd"])],
    ]


def _short(unit: str) -> str:
    parts = unit.split(".")
    return ".".join(parts[-2:]) if len(parts) > 2 else unit


def _render_parallel(f, console=console) -> None:
    """Per-stage times, communication by kind, memory per GPU of a parallel forecast."""
    rows = [[s["stage"], f"{_short(s['first'])} .. {_short(s['last'])}", s["layers"], dur(s["forward_ms"] / 1e3),
             dur(s["backward_ms"] / 1e3), dur(s["recompute_ms"] / 1e3), dur(s["tensor_comm_ms"] / 1e3),
             count(s["parameters"]), s["in_flight"], size(s["memory_bytes"])] for s in f.stages]
    console.print(table("pipeline stages (per micro-batch, one GPU of the stage)",
                        ["stage", "layers", "n", "forward", "backward", "recompute", "tensor comm", "params/GPU",
                         "in flight", "memory"], rows, 2, compact=True))
    kinds = [[k, dur(f.comm_exposed_by_kind.get(k, 0.0)), dur(f.comm_total_by_kind.get(k, 0.0))]
             for k in f.comm_total_by_kind if f.comm_total_by_kind.get(k, 0.0) > 0]
    if kinds:
        console.print(table("communication per step (busiest GPU)", ["kind", "exposed", "total"], kinds))
    m = f.memory
    console.print(table(f"memory per GPU (stage {m.get('stage', 0)})", ["", "bytes"], [
        [k, size(m.get(k, 0))] for k in ("parameters", "gradients", "optimizer", "weight_copies", "activations",
                                          "transient", "buffers",
                                          "peak")]))


def register(app: typer.Typer) -> None:
    @app.command()
    def predict(
        model: str = typer.Argument(..., help=MODEL_HELP),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU name (see `traincast gpus`)"),
        gpus: int = typer.Option(1, "--gpus", help="GPUs in total"),
        nodes: Optional[int] = typer.Option(None, "--nodes", help="nodes the GPUs are spread over"),
        batch_size: int = typer.Option(..., "--batch-size", "-b", help="global batch (per GPU with --per-gpu-batch)"),
        per_gpu_batch: bool = typer.Option(False, "--per-gpu-batch", help="weak scaling: --batch-size is per GPU"),
        epochs: float = typer.Option(1.0, "--epochs"),
        dataset_size: Optional[int] = typer.Option(None, "--dataset-size", help="training samples per epoch "
                                                   "(without it, --tokens or --steps, and no default for the model: "
                                                   "one iteration only)"),
        tokens: Optional[str] = typer.Option(None, "--tokens", help="training tokens per epoch, e.g. 15T, 300B, "
                                             "2.5e12 (models that read token sequences: samples = tokens / "
                                             "sequence length)"),
        steps: Optional[int] = typer.Option(None, "--steps", help="optimizer steps of the whole job (instead of "
                                            "--epochs and --dataset-size)"),
        precision: str = typer.Option("fp32", "--precision", help=_names("precision")),
        optimizer: str = typer.Option("sgd", "--optimizer", help=_names("optimizer")),
        sync: str = typer.Option("nccl", "--sync", help=_names("sync")),
        no_overlap: bool = typer.Option(False, "--no-overlap", help="no overlap of gradient sync with backward"),
        freeze: Optional[str] = typer.Option(None, "--freeze", help="none | all-but-last | all-but-last:K"),
        instance: Optional[str] = typer.Option(None, "--instance", help="cloud instance (see `traincast instances`)"),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", help="sequence length of transformer models"),
        input_shape: Optional[str] = typer.Option(None, "--input-shape", help=INPUT_SHAPE_HELP),
        network: Optional[float] = typer.Option(None, "--network-gbit", help="inter-node network, Gb/s"),
        device: Optional[str] = typer.Option(None, "--device", help="'local': this machine, as calibrated"),
        profile: Optional[str] = typer.Option(None, "--profile", help="a device profile from `traincast calibrate`"),
        predictor_name: Optional[str] = typer.Option(None, "--predictor", help=_names("predictor") + " (default: auto)"),
        adaptation: str = typer.Option("none", "--adaptation",
                                       help="learned predictor: none | auto (the one `traincast fit adapt` saved "
                                            "for the GPU, if any; the forecast names it) | an adaptation file"),
        catalog: Catalogs = typer.Option(None, "--catalog", help="extra catalog YAML file(s)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
        tp: int = typer.Option(1, "--tp", help="tensor-parallel degree (Megatron column/row split of each layer)"),
        pp: int = typer.Option(1, "--pp", help="pipeline stages (contiguous groups of layers)"),
        dp: Optional[int] = typer.Option(None, "--dp", help="data-parallel degree (default: GPUs / (tp x pp))"),
        ep: int = typer.Option(1, "--ep", help="expert-parallel degree (mixture of experts)"),
        zero: Optional[int] = typer.Option(None, "--zero", help="ZeRO stage 0 (none) | 1 | 2 | 3 (shard optimizer / + gradients "
                                                               "/ + parameters over data-parallel ranks)"),
        fsdp: Optional[str] = typer.Option(None, "--fsdp", help="PyTorch FSDP: full | grad-op | hybrid"),
        micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="samples per micro-batch per replica "
                                                  "(default: the whole per-replica batch; 1 with --pp)"),
        schedule: str = typer.Option("1f1b", "--schedule", help=_parallel_names("schedule")),
        recompute: str = typer.Option("none", "--recompute", help=_parallel_names("recompute")),
        sequence_parallel: bool = typer.Option(False, "--sequence-parallel",
                                               help="split norms and dropout over the tensor ranks by tokens"),
        offload_optimizer: bool = typer.Option(False, "--offload-optimizer",
                                               help="optimizer states and step on the CPU (ZeRO-Offload)"),
        best_layout: bool = typer.Option(False, "--best-layout", help="the fastest layout that fits, as "
                                         "`traincast parallelize` finds it (instead of --tp/--pp/--zero/...)"),
        cp: int = typer.Option(1, "--cp", help="context-parallel degree: the sequence split over cp GPUs"),
        cp_kind: str = typer.Option("ring", "--cp-kind", help=_parallel_names("cp_kind")),
        cp_rotate: str = typer.Option("allgather", "--cp-rotate", help=_parallel_names("cp_rotate")),
        kv_repeat: bool = typer.Option(False, "--kv-repeat", help=KV_REPEAT_HELP),
        fp8_all_gather: bool = typer.Option(False, "--fp8-all-gather",
                                            help="FSDP/ZeRO-3 gathers the layers' weights in FP8 (FP8 precisions)"),
        fp8_attention: bool = typer.Option(False, "--fp8-attention",
                                           help="FP8 precisions: the attention kernels in FP8 too (cuDNN FP8 attention)"),
        tp_comm_overlap: bool = typer.Option(False, "--tp-comm-overlap",
                                             help="the sequence-parallel all-gathers and reduce-scatters run under "
                                                  "the GEMMs (Megatron-Core / Transformer Engine userbuffers; needs "
                                                  "--sequence-parallel)"),
        loader_workers: Optional[int] = typer.Option(None, "--loader-workers",
                                                     help="data-loader worker processes per GPU decoding images "
                                                          "(default: from --instance's vCPUs; else not counted)"),
        kernels: str = typer.Option("eager", "--kernels", help=KERNELS_HELP),
        sdpa: str = typer.Option("auto", "--sdpa", help=SDPA_HELP),
        memory_format: str = typer.Option("contiguous", "--memory-format", help=MEMORY_FORMAT_HELP),
        task: Optional[str] = typer.Option(None, "--task", help=HF_TASK_HELP),
        image_size: Optional[int] = typer.Option(None, "--image-size", help=IMAGE_SIZE_HELP),
        audio_seconds: Optional[float] = typer.Option(None, "--audio-seconds", help="seconds of audio per sample "
                                                      "of a Hugging Face speech model (default: 10; Whisper: 30)"),
        num_frames: Optional[int] = typer.Option(None, "--num-frames", help=NUM_FRAMES_HELP),
        measured_step_ms: Optional[float] = typer.Option(None, "--measured-step-ms", help="one training step of "
                                                         "this job (its per-GPU batch, one GPU) timed on the GPU "
                                                         "--measured-on names: the forecast's compute is scaled by "
                                                         "measured / forecast there"),
        measured_on: Optional[str] = typer.Option(None, "--measured-on", help="the GPU --measured-step-ms was "
                                                  "timed on (see `traincast gpus`)"),
        gpu_mtbf_hours: Optional[float] = GPU_MTBF_OPTION,
        restart_minutes: Optional[float] = RESTART_OPTION,
        checkpoint_every: Optional[float] = CHECKPOINT_EVERY_OPTION,
        checkpoint_gb_per_s: Optional[float] = CHECKPOINT_BW_OPTION,
    ):
        """Forecast iteration, epoch and total time, cost and memory of a training job."""
        from traincast.predict.options import forecast_from_options

        f = forecast_from_options(model, gpu=gpu, gpus=gpus, nodes=nodes, batch_size=batch_size,
                                  per_gpu_batch=per_gpu_batch, epochs=epochs, dataset_size=dataset_size,
                                  precision=precision, optimizer=optimizer, sync=sync, no_overlap=no_overlap,
                                  freeze=freeze, instance=instance, seq_len=seq_len, network_gbit=network,
                                  device=device, profile=profile, predictor=predictor_name, adaptation=adaptation,
                                  catalog=_catalog(catalog), tp=tp, pp=pp, dp=dp, ep=ep, zero=zero, fsdp=fsdp,
                                  micro_batch=micro_batch, schedule=schedule, recompute=recompute,
                                  sequence_parallel=sequence_parallel, offload_optimizer=offload_optimizer,
                                  cp=cp, cp_kind=cp_kind, fp8_all_gather=fp8_all_gather, fp8_attention=fp8_attention,
                                  tp_comm_overlap=tp_comm_overlap, cp_rotate=cp_rotate, kv_repeat=kv_repeat,
                                  loader_workers=loader_workers, inputs=_inputs(input_shape), kernels=kernels,
                                  memory_format=memory_format, task=task, image_size=image_size, audio_seconds=audio_seconds,
                                  num_frames=num_frames, measured_step_ms=measured_step_ms, measured_on=measured_on,
                                  steps=steps, tokens=tokens, best_layout=best_layout,
                                  gpu_mtbf_hours=gpu_mtbf_hours, restart_minutes=restart_minutes,
                                  checkpoint_every=checkpoint_every, checkpoint_gb_per_s=checkpoint_gb_per_s,
                                  sdpa=sdpa.strip().lower())
        if as_json:
            print_json(f.to_dict())
        else:
            render_forecast(f)

    @app.command("trace")
    def trace_cmd(
        model: str = typer.Argument(..., help=MODEL_HELP),
        batch_size: int = typer.Option(32, "--batch-size", "-b"),
        precision: str = typer.Option("fp32", "--precision", help=_names("precision")),
        optimizer: str = typer.Option("sgd", "--optimizer", help=_names("optimizer")),
        seq_len: Optional[int] = typer.Option(None, "--seq-len"),
        freeze: Optional[str] = typer.Option(None, "--freeze"),
        input_shape: Optional[str] = typer.Option(None, "--input-shape", help=INPUT_SHAPE_HELP),
        ops: bool = typer.Option(False, "--ops", help="list every op"),
        out: Optional[Path] = typer.Option(None, "--out", help="write the workload JSON to this file"),
        as_json: bool = typer.Option(False, "--json"),
        task: Optional[str] = typer.Option(None, "--task", help=HF_TASK_HELP),
        image_size: Optional[int] = typer.Option(None, "--image-size", help=IMAGE_SIZE_HELP),
        audio_seconds: Optional[float] = typer.Option(None, "--audio-seconds", help="seconds of audio per sample "
                                                      "of a Hugging Face speech model (default: 10; Whisper: 30)"),
        num_frames: Optional[int] = typer.Option(None, "--num-frames", help=NUM_FRAMES_HELP),
        kernels: str = typer.Option("eager", "--kernels", help=KERNELS_HELP),
    ):
        """Trace one training step on the meta device: ops, FLOPs, bytes, memory (with --kernels: as a compiler
        runs it, its fused kernels' bytes and the activations it keeps)."""
        from traincast.predict.options import hf_inputs
        from traincast.workload import PHASES, trace
        from traincast.workload.fusion import apply_kernels, check_kernels

        check_kernels(kernels)
        with hf_inputs(task, image_size, audio_seconds, num_frames) as notes:
            wl = apply_kernels(trace(model, batch_size=batch_size, precision=precision, optimizer=optimizer,
                                     seq_len=seq_len, freeze=freeze, inputs=_inputs(input_shape)), kernels)
            notes.extend(wl.kernel_notes() if kernels != "eager" else [])
        if out is not None:
            wl.to_json(out)
        if as_json:
            print_json(wl.to_dict(with_ops=ops))
            return
        ph = wl.by_phase()
        rows = [[p, ph[p]["ops"], flops(ph[p]["flops"]), size(ph[p]["bytes"])] for p in PHASES]
        rows.append(["total", len(wl.ops), flops(wl.flops()), size(wl.bytes())])
        console.print(table(f"{wl.model}: one training step, batch {wl.batch_size}, {wl.optimizer}, {precision}",
                            ["phase", "ops", "FLOPs", "bytes moved"], rows))
        m = wl.memory
        console.print(table("memory per device", ["", "bytes"], [
            ["parameters", size(m.parameter_bytes)], ["gradients", size(m.gradient_bytes)],
            ["optimizer state", size(m.optimizer_state_bytes)], ["activations (saved for backward)", size(m.activation_bytes)],
            ["largest transient", size(m.transient_bytes)],
            ["peak, one GPU (gradients made as activations are freed)", size(m.peak(grads_held=False))],
            ["peak, data-parallel replica (gradients held in DDP's buckets)", size(m.peak_bytes)],
        ]))
        for n in dict.fromkeys(notes):
            console.print(f"[yellow]note:[/yellow] {n}")
        console.print(f"inputs: {wl.input_description}")
        console.print(f"parameters: {wl.parameters:,} ({wl.trainable_parameters:,} trainable); "
                      f"forward: {wl.flops('forward') / wl.batch_size / 2e9:.3f} GMACs per sample; "
                      f"traced in {wl.trace_s:.2f} s")
        if ops:
            rows = [[i, o.phase, o.aten, o.module, o.op_class, o.dtype, f"{o.flops:,}", f"{o.bytes_total:,}"]
                    for i, o in enumerate(wl.ops)]
            console.print(table("ops", ["#", "phase", "aten", "module", "class", "dtype", "FLOPs", "bytes"], rows, 6))

    @app.command()
    def models(as_json: bool = typer.Option(False, "--json")):
        """The model zoo, the named language models, and every torchvision model."""
        from traincast.workload import llms, tvtasks, zoo

        rows = [[e.name, e.family, e.description] for e in [*zoo.ZOO.values(), *llms.entries()]]
        tv = [n for n in zoo.torchvision_names() if n not in zoo.ZOO]
        tasks = tvtasks.task_names()
        if as_json:
            hub = {n: e["hub"] for n, e in llms.models().items() if e["hub"]}
            print_json([dict(name=r[0], family=r[1], description=r[2]) | ({"hub": hub[r[0]]} if r[0] in hub else {})
                        for r in rows]
                       + [dict(name=n, family="vision", description=f"{n} (torchvision)") for n in tv]
                       + [dict(name=n, family="vision", description=tvtasks.description(n)) for n in tasks])
            return
        console.print(table("models", ["name", "family", "description"], rows, justify_right_from=9))
        console.print("aliases: " + ", ".join(f"{a} -> {b}" for a, b in zoo.ALIASES.items()))
        console.print("named language models by their hub id too: " + ", ".join(
            f"{e['hub']} -> {n}" for n, e in llms.models().items() if e["hub"]))
        console.print(f"and every torchvision classification model ({len(tv)} more, ImageNet-1k input): "
                      + ", ".join(tv))
        for task in dict.fromkeys(tasks.values()):
            names_ = [n for n, t in tasks.items() if t == task]
            console.print(f"torchvision {task} ({len(names_)}): " + ", ".join(names_))
        from traincast.workload.sources import SOURCES

        console.print("model sources (recognised in this order): " + "; ".join(
            f"{e.name}: {e.help}" for e in SOURCES.entries()) + "; or from Python any nn.Module with its inputs")

    @app.command("gpus")
    def gpus_cmd(catalog: Catalogs = typer.Option(None, "--catalog"), as_json: bool = typer.Option(False, "--json")):
        """The devices in the catalog, with their peaks and sources."""
        cat = _catalog(catalog)
        devs = list(cat.devices.values())
        if as_json:
            from dataclasses import asdict

            print_json([asdict(d) for d in devs])
            return
        f = lambda x: "-" if x is None else f"{x:g}"  # noqa: E731
        rows = [[d.name, d.generation, f(d.fp32_tflops), f(d.tf32_tflops), f(d.fp16_tflops), f(d.bf16_tflops),
                 f(d.fp8_tflops), f(d.fp4_tflops), f"{d.memory_gib:g}", f"{d.memory_bandwidth_gb_per_s:g}",
                 f"{d.link.type} {d.link.gb_per_s:g}" + (f" x{d.nvlink_domain_gpus}" if d.nvlink_domain_gpus else ""),
                 d.date] for d in devs]
        console.print(table("devices (TFLOP/s dense; memory GiB; bandwidth GB/s; link GB/s per direction x GPUs per "
                            "NVLink domain)", ["name", "gen", "fp32", "tf32", "fp16", "bf16", "fp8", "fp4", "mem", "bw",
                                               "link", "date"], rows, 2))

    @app.command()
    def instances(catalog: Catalogs = typer.Option(None, "--catalog"), as_json: bool = typer.Option(False, "--json")):
        """Cloud instances and servers with their on-demand prices."""
        cat = _catalog(catalog)
        insts = list(cat.instances.values())
        if as_json:
            print_json([dict(name=i.name, provider=i.provider, gpu=i.device.name, gpus=i.gpus,
                             usd_per_hour=i.usd_per_hour, network_gbit_per_s=i.network_gbit_per_s,
                             region=i.region, date=i.date, source=i.source) for i in insts])
            return
        rows = [[i.name, i.provider, i.device.name, i.gpus, usd(i.usd_per_hour),
                 "-" if i.network_gbit_per_s is None else f"{i.network_gbit_per_s:g}", i.region or "-", i.date]
                for i in insts]
        console.print(table("instances (on-demand $/h; network Gb/s)",
                            ["name", "provider", "gpu", "gpus", "$/h", "net", "region", "date"], rows, 3))

    @app.command("plan")
    def plan_cmd(
        model: str = typer.Argument(..., help=MODEL_HELP),
        epochs: float = typer.Option(1.0, "--epochs"),
        dataset_size: Optional[int] = typer.Option(None, "--dataset-size", help="training samples per epoch"),
        tokens: Optional[str] = typer.Option(None, "--tokens", help="training tokens per epoch, e.g. 15T, 300B "
                                             "(models that read token sequences)"),
        steps: Optional[int] = typer.Option(None, "--steps", help="optimizer steps of the whole job"),
        batch_size: int = typer.Option(..., "--batch-size", "-b", help="global batch (per GPU with --per-gpu-batch)"),
        per_gpu_batch: bool = typer.Option(False, "--per-gpu-batch", help="weak scaling"),
        deadline: Optional[str] = typer.Option(None, "--deadline", help="e.g. 24h, 90m, 2d, 2026-12-04T17:00, "
                                                "2026-12-04 (the end of that day), friday (the end of the coming one)"),
        budget: Optional[float] = typer.Option(None, "--budget", help="USD"),
        gpus: str = typer.Option("1,2,4,8,16,32,64", "--gpus", help="GPU totals to consider"),
        gpu_types: Optional[str] = typer.Option(None, "--gpu-types", help="comma-separated GPU names"),
        instances: Optional[str] = typer.Option(None, "--instances", help="comma-separated instance names"),
        precision: str = typer.Option("fp32", "--precision", help=_names("precision")),
        optimizer: str = typer.Option("sgd", "--optimizer", help=_names("optimizer")),
        seq_len: Optional[int] = typer.Option(None, "--seq-len"),
        predictor_name: str = typer.Option("auto", "--predictor", help=_names("predictor")),
        adaptation: str = typer.Option("none", "--adaptation",
                                       help="learned predictor: none | auto (each GPU's `traincast fit adapt` "
                                            "adaptation, if saved)"),
        plot_path: Optional[Path] = typer.Option(Path("plan.png"), "--plot", help="PNG of all configurations ('' for none)"),
        show_all: bool = typer.Option(False, "--all", help="list every configuration, not just the front"),
        layouts: str = typer.Option("auto", "--layouts", help="auto (the fastest parallel layout where replicas do "
                                    "not fit or the model has >= 1B parameters) | data-parallel | search (always)"),
        kernels: str = typer.Option("eager", "--kernels", help=KERNELS_HELP),
        sdpa: str = typer.Option("auto", "--sdpa", help=SDPA_HELP),
        memory_format: str = typer.Option("contiguous", "--memory-format", help=MEMORY_FORMAT_HELP),
        catalog: Catalogs = typer.Option(None, "--catalog"),
        as_json: bool = typer.Option(False, "--json"),
        profile: Optional[str] = typer.Option(None, "--profile", help="a `calibrate --device cuda --host-only` "
                                              "profile: every GPU's kernels issued by that host"),
        gpu_mtbf_hours: Optional[float] = GPU_MTBF_OPTION,
        restart_minutes: Optional[float] = RESTART_OPTION,
        checkpoint_every: Optional[float] = CHECKPOINT_EVERY_OPTION,
        checkpoint_gb_per_s: Optional[float] = CHECKPOINT_BW_OPTION,
    ):
        """Which hardware? Every (instance x count): Pareto front of expected wall clock (failures, restarts and
        checkpoints counted) vs its cost, deadline and budget."""
        from traincast.plan.pareto import parse_deadline_s, plan, plot
        from traincast.predict.goodput import Reliability

        if plot_path is not None and str(plot_path) in ("", "."):  # --plot "": no plot
            plot_path = None
        if plot_path is not None:
            plot_path = png_path(plot_path)
        counts = split_list(gpus, "--gpus", int)
        types = split_list(gpu_types, "--gpu-types") if gpu_types else None
        insts = split_list(instances, "--instances") if instances else None
        from traincast.predict.options import parse_count

        res = plan(model, epochs=epochs, dataset_size=dataset_size, batch_size=batch_size, steps=steps,
                   tokens=parse_count(tokens, "--tokens") if tokens is not None else None,
                   per_gpu_batch=per_gpu_batch, gpus=counts, gpu_types=types, instances=insts,
                   deadline_s=parse_deadline_s(deadline) if deadline else None, budget_usd=budget,
                   precision=precision, optimizer=optimizer, seq_len=seq_len, catalog=_catalog(catalog),
                   predictor=predictor_name.strip().lower(), adaptation=adaptation.strip().lower(),
                   layouts=layouts.strip().lower(), kernels=kernels.strip().lower(), memory_format=memory_format,
                   host_profile=profile, sdpa=sdpa.strip().lower(),
                   reliability=Reliability.from_options(gpu_mtbf_hours, restart_minutes,
                                                                               checkpoint_every, checkpoint_gb_per_s))
        if plot_path:
            plot(res, str(plot_path))
        if as_json:
            print_json(res.to_dict())
            return
        shown = res.configs if show_all else res.front
        rows = [[c.instance, c.device, c.gpus, c.layout or "data parallel", c.per_gpu_batch, dur(c.iteration_s),
                 "-" if c.mfu is None else f"{100 * c.mfu:.0f}%",
                 dur(c.total_s), "never" if c.wall_s is None else f"{dur(c.wall_s)} ({100 * c.goodput:.0f}%)",
                 usd(c.wall_cost_usd), "yes" if c.pareto else "", c.reason or "ok"]
                for c in sorted(shown, key=lambda c: c.wall)]
        console.print(table(f"{res.model}: {len(res.configs)} configurations, " + ("all" if show_all else "Pareto front"),
                            ["instance", "gpu", "GPUs", "layout", "batch/replica", "iteration", "MFU", "training",
                             "wall clock (goodput)", "cost", "front", "status"], rows, 2, compact=True))
        console.print("wall clock: failures, restarts and checkpoints counted (traincast predict shows them); "
                      "cost: of the wall clock")
        by = {}
        for c in res.configs:
            by.setdefault(c.predictor, set()).add(c.device)
        console.print("timed by " + "; ".join(f"the {p} predictor: {', '.join(sorted(d))}" for p, d in sorted(by.items())))
        if profile:
            from traincast.predict.profile import find_profile

            console.print(find_profile(profile).host_note())
        for label, c in (("fastest", res.fastest), ("cheapest", res.cheapest),
                         ("cheapest meeting deadline and budget", res.cheapest_feasible)):
            console.print(f"{label}: " + ("none" if c is None else
                          f"{c.gpus}x {c.device} on {c.instance} x{c.instances}: {dur(c.wall)}, {usd(c.wall_cost_usd)}"))
        if plot_path:
            console.print(f"plot: {plot_path}")

    @app.command()
    def demo(as_json: bool = typer.Option(False, "--json")):
        """ResNet-50 on ImageNet-1k, 90 epochs, batch 256: 8xV100 vs 8xA100 vs 8xH100."""
        from traincast.predict import WorkloadFamily, forecast

        fam = WorkloadFamily("resnet50")
        res = []
        for inst in ("p3.16xlarge", "p4d.24xlarge", "p5.48xlarge"):
            res.append(forecast("resnet50", instance=inst, gpus=8, batch_size=256, epochs=90,
                                dataset_size=1281167, family=fam))
        if as_json:
            print_json([f.to_dict() for f in res])
            return
        console.print("[bold]ResNet-50, ImageNet-1k (1,281,167 images), 90 epochs, global batch 256, fp32, SGD-momentum[/bold]")
        rows = [[f"8x {f.device.split('-')[0]}", f.instance, dur(f.iteration_s), dur(f.total_s),
                 usd(f.usd_per_hour), usd(f.cost_usd), f"{f.scaling[-1].efficiency * 100:.0f}%" if f.scaling else "-",
                 f.bottleneck] for f in res]
        console.print(table("forecast", ["GPUs", "instance", "iteration", "total", "$/h", "cost", "scaling",
                                         "bound"], rows, 2, compact=True))
        best = min(res, key=lambda f: f.cost_usd or float("inf"))
        fast = min(res, key=lambda f: f.total_s)
        console.print(f"fastest: {fast.device} ({dur(fast.total_s)}); cheapest: {best.device} ({usd(best.cost_usd)})")
        console.print("details of one: traincast predict resnet50 --instance p4d.24xlarge --gpus 8 "
                      "--batch-size 256 --epochs 90 --dataset-size 1281167")
