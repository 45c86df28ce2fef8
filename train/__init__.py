"""Training pipeline: built-in task, data reading, tokenizer, batching (more to come)."""
