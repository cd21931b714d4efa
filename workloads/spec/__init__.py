"""What the sweeper process knows of the workloads without importing torch: each built-in workload's knob class
(a frozen dataclass, ``Literal`` choices and defaults) and its ``check`` before launch, the knobs the shared
helpers interpret (:mod:`workloads.spec.training`), the JPEG pipeline's (:mod:`workloads.spec.data`) and the
``distributed`` node's schema (:mod:`workloads.spec.distributed`).

Runs in the sweeper process and the Hydra job (validation, ``check``) and in the trial (the workload modules
read their knobs through these classes). Imports nothing but the standard library and ``workloads.base``.
"""

from workloads.spec.data import DataKnobs
from workloads.spec.distributed import DistributedConf
from workloads.spec.matmul import MatmulKnobs
from workloads.spec.resnet50 import ResNet50Knobs
from workloads.spec.training import TrainingKnobs
from workloads.spec.transformer_block import TransformerBlockKnobs

__all__ = [
    "DataKnobs",
    "DistributedConf",
    "MatmulKnobs",
    "ResNet50Knobs",
    "TrainingKnobs",
    "TransformerBlockKnobs",
]
