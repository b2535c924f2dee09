"""Data sources (generated dates, Multi30k, spa-eng, plain parallel files) and the tf.data pipeline."""
