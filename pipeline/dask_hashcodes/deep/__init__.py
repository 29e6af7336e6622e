"""Deep hash functions (PyTorch, the optional ``deep`` extra): the networks and their
training steps. Nothing here imports torch until a deep method is used."""
