"""The token vocabularies of the text families, as their datasets are written and their models'
embedding tables are sized (the task catalogue reads them without loading a family)."""

# text.py: bytes, then the end-of-text token
EOT = 256
BYTE_VOCAB_SIZE = 257

# glue.py, and the masked LM pretrained for it: bytes, then the special tokens
BERT_PAD, BERT_CLS, BERT_SEP, BERT_MASK = 256, 257, 258, 259
BERT_VOCAB_SIZE = 260

# listops.py: id 0 is padding
LISTOPS_OPERATORS = ("[MAX", "[MIN", "[MED", "[SM")
LISTOPS_CLOSE = "]"
LISTOPS_PAD = "<pad>"
LISTOPS_VOCAB = (LISTOPS_PAD, *LISTOPS_OPERATORS, LISTOPS_CLOSE, *[str(v) for v in range(10)])
