"""Evaluation (§6.1): translate text with the trained model, and score translations.

translate.py decodes lines in their input order (greedy or beam search, batched by length);
scores.py computes sacreBLEU, chrF and the paper's tokenised BLEU; export_ct2.py writes a
trained model for CTranslate2 (serving).
Imports: the foundation and train.data (batching).
"""
