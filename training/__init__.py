"""What a training run needs beyond the model and optimizer: mixed precision, gradient merge, process set-up
(threads, affinity, data parallelism), validation on held-out shards and the run's report.

Imports utils/, kernels/, preprocessing/ and the root's loss and pretraining_dataset. Imported by the entry
scripts, finetuning/ and inference/.
"""
