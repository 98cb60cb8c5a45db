"""Serving a fine-tuned model: export, and the predictors of Paddle Inference (inference), ONNX Runtime
(onnx_backend) and OpenVINO (openvino_backend) in fp32, bf16 and int8.

Imports utils/, kernels/, training/ and the root's modeling. Imported by run_squad.py, run_glue.py and
downstream.py.
"""
