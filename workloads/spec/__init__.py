"""What the sweeper process knows of the workloads without importing torch: each built-in workload's knob class
(a frozen dataclass, ``Literal`` choices and defaults) and its ``check`` before launch, the knobs the shared
helpers interpret (:mod:`workloads.spec.training`), the JPEG pipeline's (:mod:`workloads.spec.data`) and the
``distributed`` node's schema (:mod:`workloads.spec.distributed`).

Runs in the sweeper process and the Hydra job (validation, ``check``) and in the trial (the workload modules
read their knobs through these classes). Imports nothing but the standard library and ``workloads.base``.
"""

import dataclasses

from workloads.spec.data import DataKnobs
from workloads.spec.distributed import DistributedConf
from workloads.spec.matmul import MatmulKnobs
from workloads.spec.resnet50 import ResNet50Knobs
from workloads.spec.training import STEP_OUTSIDE_COMPILE, TrainingKnobs
from workloads.spec.transformer_block import TransformerBlockKnobs

# The knobs the shared helpers apply outside the compiled region: ``TrainStep`` compiles the forward and the loss
# only (the optimizer's update and the CUDA queues stay around it), and the whole input pipeline runs before it.
# A compiled configuration that differs from a measured one only in these finds Inductor's cache warm (the sweeper's
# cost model prices it so: ``hydra.sweeper.graph_neutral``).
OUTSIDE_COMPILE: tuple[str, ...] = STEP_OUTSIDE_COMPILE + tuple(f.name for f in dataclasses.fields(DataKnobs))

__all__ = [
    "OUTSIDE_COMPILE",
    "DataKnobs",
    "DistributedConf",
    "MatmulKnobs",
    "ResNet50Knobs",
    "TrainingKnobs",
    "TransformerBlockKnobs",
]
