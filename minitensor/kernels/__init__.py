"""Kernels, one op and direction per folder (see README.md).

Importing this package changes nothing: settings a backend needs (Numba's
threading layer, for one) are made when that backend is created.
"""
