"""Parsing as translation (§6.3): Penn Treebank trees, their linearisation, EVALB, and the parse scores.

treebank.py turns `.mrg` files into (words, linearised tree, gold tree) text files for the
data stage; trees.py reads, cleans, linearises and repairs trees; evalb.py and evalb_report.py
are EVALB; scoring.py turns model output into trees and scores them beside a baseline.
Imports: the foundation only (train.errors), so the data stage can read treebanks through it.
"""
