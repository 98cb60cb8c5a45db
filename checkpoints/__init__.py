"""Weights on disk: training checkpoints and their resume forms, the one loader of pretrained weights, the
Hugging Face and NVIDIA (NGC) layouts and names, and the safe readers of Paddle's and torch's files.

Imports utils/ and the root's bert_config, modeling and tokenizer. Imported by the entry scripts, finetuning/
and convert_checkpoint.py; never by training/, kernels/ or preprocessing/.
"""
