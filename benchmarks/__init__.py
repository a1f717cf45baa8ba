"""The verglas benchmark suite: programs run side by side with numpy, PyTensor, JAX, cupy."""
