"""The index objects and the searches they compose: the linear scan (hamming), multi-index
hashing (mih), inverted files (ivf, and serving: one whose lists are in memory), re-ranking
(rerank), and the Index objects (index: FlatIndex, MIHIndex, IVFIndex, Rerank). Every index takes
query vectors in ``search(vectors, k)`` (encoded with its model) and packed codes, or ``Queries``
holding codes and vectors, in ``search_codes(codes, k)`` (queries: what each is, checked, never
guessed). The search workflow over a stored dataset is ``dask_hashcodes.search``.
"""
