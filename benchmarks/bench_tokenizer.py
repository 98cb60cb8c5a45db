"""Tokens/s of batch encoding WikiText-2 on one core: tokenizer.BertTokenizer against HF `tokenizers` used directly.

    python benchmarks/bench_tokenizer.py

The HF baseline is the standard BERT pipeline built from the same vocab (BertNormalizer, BertPreTokenizer,
WordPiece), called on the same batches. Both run in this process, alternating, on one pinned core with the Rust
thread pool at one thread; the best of several rounds is kept for each, and the ratio is what to read, since other
work on the machine moves the absolute numbers. Target: ours / HF >= 0.9.
"""

from __future__ import annotations

import os

os.environ["RAYON_NUM_THREADS"] = "1"  # must be set before the tokenizers pool starts
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import machine  # noqa: E402
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tokenizer import BertTokenizer  # noqa: E402

SHARED = Path(os.environ.get("PADDLEBERT_SHARED_DIR", ROOT.parent / "shared"))
WIKITEXT = [SHARED / "data" / "wikitext-2" / f"wiki.{name}" for name in ("test.raw", "valid.tokens", "test.tokens")]
VOCAB = SHARED / "vocab" / "bert-uncased-vocab.txt"
BATCH_SIZE = 1024
ROUNDS = 5


def hf_bert_pipeline(vocab_file: Path) -> Tokenizer:
    ours = BertTokenizer(str(vocab_file))
    engine = Tokenizer(models.WordPiece(ours.vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    engine.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return engine


def timed(run: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = run()
    return time.perf_counter() - start, tokens


def main() -> None:
    machine.print_header()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    texts = [line for path in WIKITEXT for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    batches = [texts[start : start + BATCH_SIZE] for start in range(0, len(texts), BATCH_SIZE)]
    ours = BertTokenizer(str(VOCAB))
    hf = hf_bert_pipeline(VOCAB)

    def hf_ids() -> int:
        return sum(len(e.ids) for batch in batches for e in hf.encode_batch_fast(batch, add_special_tokens=False))

    def our_ids() -> int:
        return sum(len(ids) for batch in batches for ids in ours.batch_encode_ids(batch))

    def hf_tokens() -> int:
        return sum(len(e.tokens) for batch in batches for e in hf.encode_batch(batch, add_special_tokens=False))

    def our_tokens() -> int:
        return sum(len(tokens) for batch in batches for tokens in ours.batch_tokenize(batch))

    def hf_offsets() -> int:
        return sum(len(hf.encode(text, add_special_tokens=False).offsets) for text in texts)

    def our_offsets() -> int:
        return sum(len(ours.tokenize_with_offsets(text)[1]) for text in texts)

    megabytes = sum(len(text.encode("utf-8")) for text in texts) / 1e6
    print(f"WikiText-2: {len(texts)} non-empty lines, {megabytes:.2f} MB, batches of {BATCH_SIZE}, one core")
    comparisons = [
        ("ids, batch_encode_ids vs encode_batch_fast", our_ids, hf_ids),
        ("tokens, batch_tokenize vs encode_batch", our_tokens, hf_tokens),
        ("offsets, tokenize_with_offsets vs encode, per text", our_offsets, hf_offsets),
    ]
    for name, ours_run, hf_run in comparisons:
        ours_best = hf_best = float("inf")
        for _ in range(ROUNDS):
            seconds, ours_count = timed(ours_run)
            ours_best = min(ours_best, seconds)
            seconds, hf_count = timed(hf_run)
            hf_best = min(hf_best, seconds)
        ours_rate, hf_rate = ours_count / ours_best, hf_count / hf_best
        print(
            f"{name}: ours {ours_rate / 1e3:,.0f}k tokens/s, HF {hf_rate / 1e3:,.0f}k tokens/s, "
            f"ratio {ours_rate / hf_rate:.2f} (token counts {ours_count} vs {hf_count})"
        )


if __name__ == "__main__":
    main()
