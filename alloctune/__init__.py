"""alloctune: find, prove and export the best PyTorch CUDA caching-allocator configuration for a workload."""
__version__ = "0.1.0"
