"""The forecast's per-module summary: a repeated block's copies are summed into one row."""

from traincast.predict import forecast
from traincast.workload.records import OpRecord, repeated_blocks


def _op(module: str, aten: str = "aten::mm", flops: int = 1) -> OpRecord:
    return OpRecord(aten=aten, phase="forward", module=module, op_class="matmul", flops=flops, bytes_read=0,
                    bytes_written=0, dtype="fp32", input_shapes=(), output_shapes=())


def test_identical_blocks_fold_and_distinct_ones_keep_their_number():
    ops = [_op("Net.stem")]
    # stage 1: block 0 has a downsampling branch, blocks 1-3 do not
    for b in range(4):
        ops += [_op(f"Net.stage.{b}.conv1"), _op(f"Net.stage.{b}.conv2"), _op(f"Net.stage.{b}", "aten::add")]
        if b == 0:
            ops.append(_op("Net.stage.0.downsample.0"))
    # numbered leaves (a Sequential of layers): a row each, even where two run the same op
    ops += [_op("Net.head.0"), _op("Net.head.1", "aten::relu"), _op("Net.head.2")]
    rows = repeated_blocks(ops)
    assert rows["Net.stem"] == ("Net.stem", 1)
    for b in (1, 2, 3):
        assert rows[f"Net.stage.{b}.conv1"] == ("Net.stage.*.conv1", 3)
        assert rows[f"Net.stage.{b}"] == ("Net.stage.*", 3)
    assert rows["Net.stage.0.conv1"] == ("Net.stage.0.conv1", 1)
    assert rows["Net.stage.0.downsample.0"] == ("Net.stage.0.downsample.0", 1)
    assert [rows[f"Net.head.{i}"][0] for i in range(3)] == ["Net.head.0", "Net.head.1", "Net.head.2"]


def test_submodules_below_a_block_are_summed_one_level_down():
    ops = [_op(f"M.layers.{i}.mlp.{p}") for i in range(2) for p in ("up", "down")]
    ops += [_op(f"M.layers.{i}.attn.{p}") for i in range(2) for p in ("q", "o")]
    rows = repeated_blocks(ops)
    assert {rows[o.module] for o in ops} == {("M.layers.*.mlp", 2), ("M.layers.*.attn", 2)}


def test_forecast_rows_sum_every_transformer_block():
    b, s, d, layers = 2, 32, 768, 12  # GPT-2 small
    f = forecast("gpt2", gpu="A100", batch_size=b, seq_len=s, dataset_size=100, scaling=False)
    by = {m["module"]: m for m in f.top_modules}
    mlp = by["GPT2LMHeadModel.transformer.h.*.mlp"]
    assert mlp["count"] == layers
    # the MLP's two GEMMs (d -> 4d -> d): 2 x 2 x tokens x d x 4d FLOPs forward, twice that backward, per block;
    # its GELU adds a few FLOPs per element
    gemm = 3 * 2 * 2 * (b * s) * d * 4 * d * layers
    assert gemm <= mlp["flops"] <= 1.01 * gemm
    assert by["GPT2LMHeadModel.transformer.h.*.attn"]["count"] == layers
    assert sum(m["share"] for m in f.top_modules) <= 1.0 + 1e-9
    # the blocks' rows are among the costliest, not one block's slice each
    assert f.top_modules[0]["count"] == layers
