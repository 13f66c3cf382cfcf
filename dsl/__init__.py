"""torch_rbln.dsl"""
