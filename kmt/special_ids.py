"""The special token ids every vocabulary reserves, defined once: the tokenizer trains its vocabularies with them,
the masks treat `PAD_ID` as padding, the data pipeline wraps targets in `START_ID` and `END_ID`, and the searches
start from `START_ID`, stop at `END_ID` and never emit `PAD_ID` or `START_ID`. No TensorFlow here, so every backend
can import it.
"""

PAD_ID = 0  # padding: masked out of attention, loss and metrics
UNK_ID = 1  # a piece the vocabulary does not hold
START_ID = 2  # the first token of every decoder input (BOS)
END_ID = 3  # the last token of every target (EOS)
SPECIAL_IDS = (PAD_ID, UNK_ID, START_ID, END_ID)
