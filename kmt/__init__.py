"""kmt: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as Keras 3 layers, for translation."""

__version__ = "0.1.0"
