"""pytest_invariance/engine"""
