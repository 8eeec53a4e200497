"""suites/e2e"""
