"""torch_rbln.autotune"""
