"""Running untrusted code: bubblewrap, namespaces and limits, the kernels and the worker slots."""
