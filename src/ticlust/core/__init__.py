"""The plumbing every room stands on: stacks, input checks, the execution seam, devices, determinism, scratch files, atomic writes and the backends that map work in-process or on dask."""
