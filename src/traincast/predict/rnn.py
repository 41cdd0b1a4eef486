"""Recurrent layers as cuDNN runs them on a GPU.

A trace on the meta device records ``nn.LSTM``/``GRU``/``RNN`` as PyTorch's native
decomposition: per time step two GEMMs (input and hidden projections), about ten
pointwise ops forward and twenty backward, each its own op. On a GPU, PyTorch
calls cuDNN instead, which per layer and direction runs

- forward: one GEMM projecting the inputs of all time steps at once, then per step
  one recurrent GEMM and one fused pointwise kernel;
- backward: per step one fused pointwise kernel and one recurrent GEMM (the
  gradient through the hidden state), then one GEMM for the input gradient of all
  steps and one per weight matrix (the weight gradients of all steps at once).

:func:`cudnn_schedule` writes that schedule as ops; :func:`rescale_rnn_modules`
times it with the same predictor and scales the traced ops of each recurrent
module and phase so that they sum to it (the per-module breakdown keeps its
shape). The tracer records each recurrent call in ``Workload.recurrent_calls``.

:class:`CudnnRecurrent` wraps any predictor that times ops one by one with this rescaling (on GPUs, where
cuDNN or MIOpen runs the recurrent layers); :func:`traincast.predict.make_predictor` gives predictors so
wrapped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from traincast.predict.base import OpTimes, Predictor, PredictorWrapper
from traincast.predict.roofline import ITEMSIZE
from traincast.workload.records import OpRecord, RecurrentCall, Workload

GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _mm(phase: str, module: str, m: int, k: int, n: int, dtype: str, size: int) -> OpRecord:
    return OpRecord("mm", phase, module, "matmul", 2 * m * k * n, (m * k + k * n) * size, m * n * size, dtype,
                    ((m, k), (k, n)), ((m, n),))


def _pointwise(phase: str, module: str, b: int, width: int, n_read: int, n_write: int, dtype: str,
               size: int) -> OpRecord:
    """One fused pointwise kernel over ``b x width`` elements reading ``n_read`` and writing ``n_write``
    such tensors (recorded as an elementwise add of that size)."""
    e = b * width
    return OpRecord("add", phase, module, "elementwise", 10 * e, n_read * e * size, n_write * e * size, dtype,
                    ((b, width),) * 2, ((b, width),))


def cudnn_schedule(call: RecurrentCall) -> list[OpRecord]:
    """The ops cuDNN runs for one recurrent call."""
    mode = call.mode
    g = GATES.get(mode, 4)
    h, t, b = call.hidden_size, call.seq_len, call.batch
    dirs = 2 if call.bidirectional else 1
    dtype = call.dtype
    size = ITEMSIZE.get(dtype, 4)
    mod = call.module
    cell = 2 if mode == "LSTM" else 1  # state tensors per step: h, and c for an LSTM
    training = call.training
    ops: list[OpRecord] = []
    for layer in range(call.num_layers):
        n_in = call.input_size if layer == 0 else h * dirs
        for _ in range(dirs):
            ops.append(_mm("forward", mod, t * b, n_in, g * h, dtype, size))
            for _ in range(t):
                ops.append(_mm("forward", mod, b, h, g * h, dtype, size))
                # reads both projections (g each) and the old cell state; writes the new state, and the
                # activated gates when they are kept for the backward pass (units of b x h elements)
                ops.append(_pointwise("forward", mod, b, h, 2 * g + cell - 1, cell + (g if training else 0),
                                      dtype, size))
            if not training:
                continue
            for _ in range(t):
                # reads the state gradients, the gates and the cell states; writes the gate gradients and
                # the gradient of the previous cell state
                ops.append(_pointwise("backward", mod, b, h, g + 2 * cell, g + cell - 1, dtype, size))
                ops.append(_mm("backward", mod, b, g * h, h, dtype, size))
            ops.append(_mm("backward", mod, t * b, g * h, n_in, dtype, size))   # input gradient, all steps
            ops.append(_mm("backward", mod, n_in, t * b, g * h, dtype, size))   # input weights' gradient
            ops.append(_mm("backward", mod, h, t * b, g * h, dtype, size))      # hidden weights' gradient
    return ops


def rescale_rnn_modules(workload: Workload, ot: OpTimes, predict_plain: Callable[[Workload], OpTimes]) -> OpTimes:
    """``ot`` with the traced ops of every recurrent module scaled, per phase, to the time of its cuDNN
    schedule as ``predict_plain`` (the same predictor, without this step) times it."""
    calls = workload.recurrent_calls
    if not calls:
        return ot
    sched = [op for c in calls for op in cudnn_schedule(c)]
    if not sched:
        return ot
    s_times = predict_plain(Workload(
        model=f"{workload.model} (cuDNN RNN schedule)", batch_size=workload.batch_size,
        optimizer=workload.optimizer, ops=tuple(sched), memory=workload.memory, parameters=0,
        trainable_parameters=0)).times_s
    target: dict = defaultdict(float)
    for op, s in zip(sched, s_times):
        target[(op.module, op.phase)] += s
    traced: dict = defaultdict(float)
    for op, s in zip(workload.ops, ot.times_s):
        if (op.module, op.phase) in target:
            traced[(op.module, op.phase)] += s
    times = list(ot.times_s)
    for i, op in enumerate(workload.ops):
        key = (op.module, op.phase)
        if traced.get(key, 0.0) > 0.0:
            times[i] *= target[key] / traced[key]
    return OpTimes(ot.predictor, tuple(times), ot.bound, ot.step_overhead_s)


class CudnnRecurrent(PredictorWrapper):
    """``inner``'s op times, with the recurrent modules of a workload rescaled on GPUs to the time ``inner``
    gives their cuDNN schedule (:func:`rescale_rnn_modules`)."""

    def predict(self, workload: Workload, device, precision: str = "fp32") -> OpTimes:
        ot = self.inner.predict(workload, device, precision)
        if device.kind != "gpu" or not workload.recurrent_calls:
            return ot
        return rescale_rnn_modules(workload, ot, lambda w: self.inner.predict(w, device, precision))


def with_cudnn_recurrent(predictor: Predictor) -> Predictor:
    """``predictor`` wrapped in :class:`CudnnRecurrent` (once)."""
    return predictor if isinstance(predictor, CudnnRecurrent) else CudnnRecurrent(predictor)
