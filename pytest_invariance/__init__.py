"""pytest-invariance: differential determinism tests for LLM inference.

Importing this package is cheap: no torch, no pandas. Heavy pieces load on use.
"""

__version__ = "0.1.0"
