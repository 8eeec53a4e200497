"""pytest_invariance/adapters"""
