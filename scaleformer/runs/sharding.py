"""Fully sharded training of a decoder-only model (``trainer.strategy=fsdp``): MASFormer's continual training.

The paper continues a 1.3B-parameter model on 8k sequences with a batch of 128; its weights, gradients and
AdamW's two moments (16 bytes a parameter, 21 GB) and the activations do not fit one GPU beside each other, so
each process holds a share of every layer (FSDP). ``trainer.strategy=fsdp`` builds Lightning's
``ModelParallelStrategy`` with every process on the data-parallel axis and the module's ``configure_model``
shards it with torch's ``fully_shard`` (FSDP2): each decoder layer one unit (gathered for its forward and
backward, then freed), the embeddings and head the root's. Lightning's ``FSDPStrategy`` (FSDP1) is not used:
it refuses CPUs (Lightning-AI/pytorch-lightning#21812), so no CPU test could prove the path a GPU run takes.

Checkpoints are whole (``save_distributed_checkpoint=False``): rank 0 gathers the weights and optimizer state
into one ``.ckpt`` file (16 bytes a parameter on its host, with ``cpu_offload``), the format every other part
of a run reads (resume, evaluation, ``scaleformer export``, the selection of weights). Exact resume needs the
data order dealt the same way on restart: :func:`scaleformer.data.sampler.deal`.

Sharding is for language-modeling runs (``data.task_metric=perplexity``); a summarization run is refused in
one line (its generation loop is not sharded: fine-tuning fits one GPU per process, use ``ddp``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from scaleformer.errors import ConfigError
from scaleformer.ops.causal_spans import decoder_layers

log = logging.getLogger("scaleformer")

FSDP = "fsdp"


def world_size(accelerator: str, devices: Any, num_nodes: int) -> int:
    """Processes the Trainer will start: devices per node (a count, a list of ids, or auto: every GPU, else one
    CPU process) times the nodes."""
    if isinstance(devices, list | tuple):
        per_node = len(devices)
    elif isinstance(devices, str) and "," in devices:  # Lightning reads "0,1" (and "1,") as a list of device ids
        per_node = len([d for d in devices.split(",") if d.strip()])
    elif isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        per_node = int(devices)
    elif isinstance(devices, int):
        per_node = devices
    else:
        per_node = -1
    if per_node == -1:  # "auto" or -1: every GPU there is
        gpu = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
        per_node = torch.cuda.device_count() if gpu else 1
    return per_node * num_nodes


def fsdp_strategy(cfg: Any, extra: dict[str, Any]) -> Any:
    """Lightning's ModelParallelStrategy for FSDP alone: all processes data-parallel, whole checkpoints."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    if cfg.data.task_metric != "perplexity":
        raise ConfigError(f"trainer.strategy={FSDP}: sharding is for language-modeling runs (continual training, "
                          f"data.task_metric=perplexity); data={cfg.data.name} is {cfg.data.task_metric}-scored "
                          "summarization or QA, whose model fits one GPU per process: use trainer.strategy=ddp")
    world = world_size(cfg.trainer.accelerator, cfg.trainer.devices, int(extra.get("num_nodes", 1) or 1))
    return ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1, save_distributed_checkpoint=False)


def shard(model: torch.nn.Module, mesh: Any) -> None:
    """``fully_shard`` each decoder layer of ``model`` (a routed causal LM), then the whole; once (Lightning
    calls ``configure_model`` again for each later ``predict``)."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    if isinstance(model, FSDPModule):
        return
    layers = decoder_layers(getattr(model, "backbone", model))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    log.info("sharded over %d processes (FSDP2): %d decoder layers, a unit each, and the rest as one",
             mesh.size(), len(layers))


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The whole state dict of a sharded ``model`` on rank 0 (empty on the others), gathered to the host; None
    when ``model`` is not sharded. A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        return None
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
