"""The CPU backend: GGUF files run on their own blocks (see ../../docs/speed-notes.md).

    reader.py   the GGUF's metadata, tensor table, and tensors memory-mapped in place
    build.py    the kernel (kernels/*.c) built per instruction set, the best one loaded
    linear.py   nn.Linear / nn.Embedding over a GGUF matrix, read in place by the kernel
    model.py    a transformers model from a GGUF: config, tokenizer, modules on blocks
    lean.py     the lean forward: one kernel call per pass for the llama family

The models layer asks `model.load()` for a model and `lean.attach()` for its lean forward;
nothing else reaches in here.
"""
