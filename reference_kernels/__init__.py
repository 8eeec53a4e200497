"""reference_kernels"""
