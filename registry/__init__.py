"""torch_rbln.registry"""
