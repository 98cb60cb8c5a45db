"""Raw text to pre-training shards: next-sentence pairs, the WordPiece cache, masking, packing, the shard formats
and the parallel pipeline that ties them (behind lddl_preprocess.py and create_pretraining_data.py).

Imports utils/ and the root's corpus, tokenizer and loss. Imported by the preprocessing commands, by
pretraining_dataset (formats, masking), by training/ and by run_pretraining.py (packing).
"""
