"""Scaling out (chapter 09): tensor and pipeline parallelism on torch.distributed.

    tensor_parallel.py    column- and row-parallel layers; two all-reduces per block
    pipeline_parallel.py  consecutive layers per process, hidden states sent stage to stage
    launch.py             run a function on N processes (gloo on CPUs, nccl on GPUs)
    demos.py              the chapter's experiments: parallel runs compared with one process
"""

from .demos import ParallelReport, compare_pipeline_parallel, compare_tensor_parallel
from .launch import run_distributed
from .pipeline_parallel import PipelineStage
from .tensor_parallel import (CommStats, RowParallelLinear, all_reduce_cost, shard_attention,
                              shard_mlp, shard_model, split_evenly)

__all__ = ["shard_model", "shard_attention", "shard_mlp", "RowParallelLinear", "PipelineStage", "CommStats", "all_reduce_cost", "split_evenly",
           "run_distributed", "compare_tensor_parallel", "compare_pipeline_parallel",
           "ParallelReport"]
