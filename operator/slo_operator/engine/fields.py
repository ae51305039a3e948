"""CRD field paths (camelCase) that ``EngineError`` and ``Note`` name.

The engine modules name the field a user should change; one home for the paths keeps
their messages consistent.
"""

F_NAME = "spec.model.name"
F_SERVED = "spec.model.servedName"
F_SIZE = "spec.model.sizeBillions"
F_MAX_LEN = "spec.model.maxModelLen"
F_CHECKPOINT = "spec.model.quantizedCheckpoint"
F_PRECISION = "spec.engine.precision"
F_KV = "spec.engine.kvCacheDtype"
F_TP = "spec.engine.tensorParallelSize"
F_GMU = "spec.engine.gpuMemoryUtilization"
F_MNBT = "spec.engine.maxNumBatchedTokens"
F_EXTRA = "spec.engine.extraArgs"
F_GPUS = "spec.hardware.gpusPerReplica"
F_PRODUCTS = "spec.hardware.gpuProducts"
F_ALLOW_Q = "spec.allowQuantization"  # on the SLOPolicy
F_MIN_BATCH = "spec.batching.minBatch"  # on the SLOPolicy
F_MAX_BATCH = "spec.batching.maxBatch"  # on the SLOPolicy
F_ITL = "spec.objectives.interTokenLatencyMs"  # on the SLOPolicy
