"""suites/ops"""
