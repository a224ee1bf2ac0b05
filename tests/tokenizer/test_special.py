from tokenmill.tokenizer.special import (BOS_ID, DEFAULT_N_SENTINELS, EOS_ID, MASK, MASK_ID, PAD_ID,
                                         SENTINEL_IDS, SPECIAL_TOKENS, sentinel, sentinel_ids, special_tokens)


def test_special_ids_are_their_positions_and_distinct():
    assert [EOS_ID, BOS_ID, PAD_ID, MASK_ID, *SENTINEL_IDS] == list(range(len(SPECIAL_TOKENS)))
    assert len(SENTINEL_IDS) == DEFAULT_N_SENTINELS
    assert len(set(SPECIAL_TOKENS)) == len(SPECIAL_TOKENS)
    assert all(t.startswith("<|") and t.endswith("|>") for t in SPECIAL_TOKENS)


def test_sentinel_count_is_a_parameter():
    toks = special_tokens(3)
    assert toks[MASK_ID] == MASK and toks[4:] == (sentinel(0), sentinel(1), sentinel(2))
    assert sentinel(0) == "<|extra_id_0|>"
    assert sentinel_ids(3) == (4, 5, 6) and sentinel_ids(0) == ()
    assert special_tokens(0) == SPECIAL_TOKENS[:4]
