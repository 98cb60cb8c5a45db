"""BERT WordPiece tokenizer: Google's original BERT tokenization rules, run by the HF `tokenizers` engine.

The rules (google-research/bert tokenization.py, Devlin et al. 2018): remove NUL, U+FFFD and control characters,
map whitespace to a space, put spaces around CJK ideographs, split on whitespace, (uncased) lowercase and strip
accents, split off every punctuation character, then greedy longest-match-first WordPiece with "##" continuations;
a word longer than `max_input_chars_per_word` characters becomes [UNK]. tests/test_tokenizer.py proves this module
equal to a pure-Python transcription of those rules on WikiText-2, SQuAD dev and hand-picked Unicode.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclass(frozen=True)
class PairEncoding:
    """`[CLS] a [SEP] b [SEP]` (or `[CLS] a [SEP]`), one entry per token in every list.

    offsets[i] is the (start, end) character span of token i in the text it came from, (0, 0) for specials;
    sequence_ids[i] is 0 for text_a, 1 for text_b and None for [CLS]/[SEP].
    """

    tokens: list[str]
    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int]]
    sequence_ids: list[int | None]


def load_vocab(vocab_file: str | Path) -> dict[str, int]:
    """token -> line index, as Google's load_vocab reads it (each line stripped; a repeated token keeps its last id)."""
    path = Path(vocab_file)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: vocab file not found")
    with open(path, encoding="utf-8") as reader:
        vocab = {line.strip(): index for index, line in enumerate(reader)}
    if not vocab:
        raise ValueError(f"{path}: vocab file is empty")
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise ValueError(f"{path}: vocab lacks the special token(s) {' '.join(missing)}")
    return vocab


def vocab_looks_cased(vocab: dict[str, int]) -> bool:
    """True when more than 1% of the non-special tokens hold an uppercase letter (an uncased vocab has none)."""
    ordinary = [token for token in vocab if not (token.startswith("[") and token.endswith("]"))]
    with_upper = sum(1 for token in ordinary if token != token.lower())
    return with_upper > 0.01 * max(len(ordinary), 1)


class BertTokenizer:
    """Google-BERT tokenization of text into WordPiece tokens and ids, with character offsets."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True, max_input_chars_per_word: int = 100):
        self.vocab_file = str(vocab_file)
        self.do_lower_case = do_lower_case
        self.max_input_chars_per_word = max_input_chars_per_word
        self.vocab = load_vocab(vocab_file)
        self.ids_to_tokens = {index: token for token, index in self.vocab.items()}
        looks_cased = vocab_looks_cased(self.vocab)
        if looks_cased and do_lower_case:
            warnings.warn(f"{vocab_file}: vocab looks cased but do_lower_case=True", stacklevel=2)
        if not looks_cased and not do_lower_case:
            warnings.warn(f"{vocab_file}: vocab looks uncased but do_lower_case=False", stacklevel=2)
        self.pad_token_id = self.vocab["[PAD]"]
        self.unk_token_id = self.vocab["[UNK]"]
        self.cls_token_id = self.vocab["[CLS]"]
        self.sep_token_id = self.vocab["[SEP]"]
        self.mask_token_id = self.vocab["[MASK]"]
        self._engine = self._build_engine()

    def _build_engine(self) -> Tokenizer:
        engine = Tokenizer(
            models.WordPiece(
                self.vocab, unk_token="[UNK]", max_input_chars_per_word=self.max_input_chars_per_word
            )
        )
        engine.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=self.do_lower_case, lowercase=self.do_lower_case
        )
        engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        # The specials are not registered as added tokens: Google's rules split a literal "[CLS]" in text like any
        # other word, and added tokens would be matched in raw text.
        engine.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", self.cls_token_id), ("[SEP]", self.sep_token_id)],
        )
        return engine

    @property
    def vocab_size(self) -> int:
        return len(self.ids_to_tokens)

    def tokenize(self, text: str) -> list[str]:
        return self._engine.encode(text, add_special_tokens=False).tokens

    def batch_tokenize(self, texts: list[str]) -> list[list[str]]:
        return [encoding.tokens for encoding in self._engine.encode_batch(texts, add_special_tokens=False)]

    def batch_encode_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of many texts at once, without [CLS]/[SEP]."""
        return [encoding.ids for encoding in self._engine.encode_batch_fast(texts, add_special_tokens=False)]

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self.vocab.get(token, self.unk_token_id) for token in tokens]

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        try:
            return [self.ids_to_tokens[index] for index in ids]
        except KeyError as error:
            raise ValueError(f"{self.vocab_file}: token id {error.args[0]} is not in the vocab") from None

    def tokenize_with_offsets(self, text: str) -> tuple[list[str], list[tuple[int, int]]]:
        encoding = self._engine.encode(text, add_special_tokens=False)
        return encoding.tokens, encoding.offsets

    def encode_pair(self, text_a: str, text_b: str | None = None) -> PairEncoding:
        encoding = self._engine.encode(text_a, text_b, add_special_tokens=True)
        return PairEncoding(
            tokens=encoding.tokens,
            input_ids=encoding.ids,
            token_type_ids=encoding.type_ids,
            offsets=encoding.offsets,
            sequence_ids=encoding.sequence_ids,
        )
