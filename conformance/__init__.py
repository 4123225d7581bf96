"""Run upstream PyTorch device-generic tests against a PrivateUse1 backend and record every outcome."""

__version__ = "0.1.0"
