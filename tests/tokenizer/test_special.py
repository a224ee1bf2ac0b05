from tokenmill.tokenizer.special import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS


def test_special_ids_are_their_positions_and_distinct():
    assert [EOS_ID, BOS_ID, PAD_ID] == list(range(len(SPECIAL_TOKENS)))
    assert len(set(SPECIAL_TOKENS)) == len(SPECIAL_TOKENS)
    assert all(t.startswith("<|") and t.endswith("|>") for t in SPECIAL_TOKENS)
