"""Stage 1, data (§5.1): text files → a shared subword vocabulary → token ids → token-budget batches.

files.py reads parallel text (plain or gzip, line-numbered errors) and writes files atomically;
builtin_task.py generates the default task; tokenizer.py is the shared sentencepiece BPE;
corpus.py encodes a corpus into memory-mapped ids; store.py prepares all of it once per corpus
content and settings; inputs.py gives a run its data (dev/test pairs, batches, model inputs);
batching.py cuts pairs into padded token budgets.
Imports: the foundation and train.parsing (for the treebank task).
"""
