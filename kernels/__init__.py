"""torch_rbln.kernels"""
