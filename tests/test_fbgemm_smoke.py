"""The pinned fbgemm-gpu(-cpu) loads with the pinned torch and its fused TBE op computes what
nn.EmbeddingBag computes; one EXACT_SGD step updates exactly the touched rows."""

from __future__ import annotations

import torch


def test_tbe_forward_matches_embedding_bag_and_sgd_updates_rows():
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)

    specs = [(100, 8, EmbeddingLocation.HOST, ComputeDevice.CPU),
             (50, 16, EmbeddingLocation.HOST, ComputeDevice.CPU)]
    op = SplitTableBatchedEmbeddingBagsCodegen(specs, optimizer=EmbOptimType.EXACT_SGD,
                                               learning_rate=0.5, weights_precision=SparseType.FP32,
                                               pooling_mode=PoolingMode.SUM)
    before = [w.detach().clone() for w in op.split_embedding_weights()]
    # batch 4: table 0 bags [1,2,3] [5] [7,7] [9]; table 1 bags [0,1] [2,2,2] [49] []
    idx = torch.tensor([1, 2, 3, 5, 7, 7, 9, 0, 1, 2, 2, 2, 49])
    off = torch.tensor([0, 3, 4, 6, 7, 9, 12, 13, 13])
    out = op(idx, off)
    assert out.shape == (4, 8 + 16)
    for t, (w, dim) in enumerate(zip(before, (8, 16))):
        bag = torch.nn.functional.embedding_bag(idx[off[4 * t]:off[4 * t + 4]], w,
                                                off[4 * t:4 * t + 4] - off[4 * t], mode="sum")
        cols = slice(0, 8) if t == 0 else slice(8, 24)
        torch.testing.assert_close(out[:, cols], bag)
    out.sum().backward()
    after = op.split_embedding_weights()
    # d(sum)/d(row) = number of times the row was looked up; SGD: w -= lr * count
    counts0 = torch.bincount(idx[:7], minlength=100).float()
    torch.testing.assert_close(after[0], before[0] - 0.5 * counts0[:, None].expand(100, 8))
    counts1 = torch.bincount(idx[7:], minlength=50).float()
    torch.testing.assert_close(after[1], before[1] - 0.5 * counts1[:, None].expand(50, 16))
