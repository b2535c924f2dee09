"""Checkpoints of other toolkits as kmt run directories: `kmt.importers.marian` (Hugging Face MarianMT, OPUS-MT)."""
