"""CPU fast paths: the MKL settings and cheaper forms of BERT's hot ops (cpu_kernels), and the loader of the fused
C++ operators in ../csrc (cpu_ops).

Imports only utils/. Imported by the model and its losses (modeling, loss, optimizer), by training/ and inference/.
"""
