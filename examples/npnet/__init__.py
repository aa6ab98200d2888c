"""A small neural-network toolkit in NumPy whose normalization layers run on
fastnorm: explicit forward and backward passes, plain SGD.

- ``layers``   Linear, ReLU, Tanh, and LayerNorm / BatchNorm twice: on
               fastnorm (``FASTNORM``) and written out in NumPy (``NUMPY``)
- ``models``   an MLP with batch and layer norm, a layer-normalized RNN, and
               the softmax cross-entropy loss
- ``data``     synthetic 8x8 digits, generated with NumPy
- ``training`` minibatches, the SGD step, the training loop
"""
