"""reference_kernels/mutants"""
