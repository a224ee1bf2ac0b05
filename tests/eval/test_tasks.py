import json
from pathlib import Path

import pytest
import torch

from tokenmill.config import ModelConfig, TaskConfig, TokenizerConfig
from tokenmill.errors import UserError
from tokenmill.eval.tasks import (TaskError, item_scores, load_task, prompt_prefix, score_task,
                                  shot_indices)
from tokenmill.model.transformer import Transformer
from tokenmill.tokenizer.bpe import train_bpe

from tests.conftest import ContextFreeModel, real_documents

FIXTURES = Path(__file__).parent / "fixtures"
FILES = {"hellaswag": "hellaswag.jsonl", "arc": "arc.jsonl", "arc_hf": "arc_hf.jsonl", "piqa": "piqa.jsonl",
         "winogrande": "winogrande.jsonl", "lambada": "lambada.jsonl"}
EOS = 0


def task(key: str, **kw) -> TaskConfig:
    fmt = "arc" if key == "arc_hf" else key
    return TaskConfig(name=key, path=str(FIXTURES / FILES[key]), format=fmt, **kw)


@pytest.fixture(scope="module")
def tok():
    docs = real_documents()
    return train_bpe(docs["prose"][:20], TokenizerConfig(vocab_size=400, n_sentinels=0))


@pytest.fixture(scope="module")
def model(tok):
    cfg = ModelConfig(vocab_size=tok.get_vocab_size(), d_model=32, n_layers=2, n_heads=4, max_seq_len=256)
    m = Transformer(cfg, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():  # larger logits than the init gives, so choices differ clearly
        m.lm_head.weight.mul_(20)
    return m.eval()


# --------------------------------------------------------------------------- parsing
def test_each_layout_parses():
    hs = load_task(task("hellaswag"))
    assert len(hs) == 8 and [it.gold for it in hs] == [0, 1, 0, 2, 1, 2, 0, 2]  # int and str labels
    assert hs[0].contexts[0] == "Baking bread: A man pours flour into a wide bowl. He"  # ctx_a + ctx_b
    assert hs[2].contexts[0] == "Two friends set up a tent at the campsite. They"  # plain ctx
    assert hs[4].contexts[0] == "How to water a plant. Check the soil. The soil"  # WikiHow tags cleaned
    assert all(len(it.continuations) == 4 and all(c.startswith(" ") for c in it.continuations) for it in hs)

    for key in ("arc", "arc_hf"):
        arc = load_task(task(key))
        assert arc[1].contexts[0].startswith("Question: ") and arc[1].contexts[0].endswith("\nAnswer:")
        assert arc[2].continuations[arc[2].gold] in (" cooled below freezing", " waves")  # numeric labels
    assert [it.gold for it in load_task(task("arc"))] == [0, 1, 2, 3, 0, 1, 2]
    assert [it.gold for it in load_task(task("arc_hf"))] == [1, 0, 1, 3, 0, 1]
    assert load_task(task("arc_hf"))[0].continuations == [" summer", " winter", " spring", " autumn"]

    pq = load_task(task("piqa"))
    assert [it.gold for it in pq] == [0, 1, 0, 1, 0, 1, 0]
    assert pq[0].contexts == ["Question: Keep bread fresh for longer.\nAnswer:"] * 2

    wg = load_task(task("winogrande"))
    assert [it.gold for it in wg] == [0, 1, 0, 0, 1, 0, 1]
    # partial scoring: option filled into the prefix, the same continuation after the blank
    assert wg[0].contexts == ["The trophy did not fit in the suitcase because the trophy",
                              "The trophy did not fit in the suitcase because the suitcase"]
    assert wg[0].continuations == [" was too big."] * 2

    lb = load_task(task("lambada"))
    assert len(lb) == 7 and lb[0].continuations == [" letter"] and lb[5].continuations == [" bread"]
    assert lb[0].contexts[0].endswith("before folding the") and all(it.gold == 0 for it in lb)


@pytest.mark.parametrize("line, missing", [
    ({"ctx": "a b", "label": 0}, "endings"),
    ({"question": {"stem": "q?", "choices": [{"text": "a", "label": "A"}, {"text": "b", "label": "B"}]}}, "answerKey"),
    ({"goal": "g", "sol1": "a", "label": 0}, "sol2"),
    ({"sentence": "a _ b", "option1": "x", "answer": "1"}, "option2"),
    ({"title": "no text"}, "text"),
])
def test_bad_item_names_file_line_and_field(tmp_path, line, missing):
    fmt = {"endings": "hellaswag", "answerKey": "arc", "sol2": "piqa", "option2": "winogrande", "text": "lambada"}[missing]
    good = json.loads((FIXTURES / FILES[fmt]).read_text().splitlines()[0])
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(line) + "\n")
    with pytest.raises(UserError, match=rf"t\.jsonl:3 .*missing field '{missing}'"):
        load_task(TaskConfig(name="t", path=str(path), format=fmt))


def test_bad_json_missing_file_and_too_many_shots(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "one two"}\n{"text": oops}\n')
    with pytest.raises(TaskError, match=r"t\.jsonl:2: not valid JSON"):
        load_task(TaskConfig(name="t", path=str(path), format="lambada"))
    with pytest.raises(TaskError, match="no such file"):
        load_task(TaskConfig(name="t", path=str(tmp_path / "nope.jsonl"), format="lambada"))
    with pytest.raises(TaskError, match="shots=7 needs at least 8 items"):
        load_task(task("piqa", shots=7))


# --------------------------------------------------------------------------- prompts
def test_shots_are_deterministic_distinct_and_never_the_item():
    items = load_task(task("piqa"))
    n = len(items)
    for k in (1, 3, n - 1):
        for i in range(n):
            picks = shot_indices(i, n, k)
            assert picks == shot_indices(i, n, k) and len(set(picks)) == k and i not in picks
            assert all(0 <= j < n for j in picks)
            prefix = prompt_prefix(items, i, k)
            assert items[i].solved() not in prefix and items[i].contexts[0] not in prefix
            assert prefix.count("\n\n") == k and all(items[j].solved() + "\n\n" in prefix for j in picks)
    assert prompt_prefix(items, 0, 0) == ""
    assert len({tuple(shot_indices(i, n, 2)) for i in range(n)}) > 1  # seeded per item, not one fixed set


# --------------------------------------------------------------------------- scoring
def reference_logprobs(model, tok, cfg: TaskConfig, max_seq_len: int) -> list[list[float]]:
    """Plain per-request loop: log_softmax over the whole sequence, sum over the continuation."""
    items = load_task(cfg)
    out = []
    for i, it in enumerate(items[: cfg.limit]):
        shots = "".join(items[j].contexts[items[j].gold] + items[j].continuations[items[j].gold] + "\n\n"
                        for j in shot_indices(i, len(items), cfg.shots)) if cfg.shots else ""
        row = []
        for ctx, cont in zip(it.contexts, it.continuations):
            c = tok.encode(cont, add_special_tokens=False).ids
            ids = ([EOS] + tok.encode(shots + ctx, add_special_tokens=False).ids + c)[-(max_seq_len + 1):]
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids[:-1]])).float(), -1)[0]
            row.append(sum(float(logp[len(ids) - 1 - len(c) + k, c[k]]) for k in range(len(c))))
        out.append(row)
    return out


@pytest.mark.parametrize("key, shots, max_seq_len", [
    ("hellaswag", 0, 256), ("hellaswag", 2, 40), ("arc", 1, 256), ("arc_hf", 0, 256),
    ("piqa", 3, 256), ("winogrande", 2, 30), ("lambada", 1, 256), ("lambada", 0, 20),
])
def test_scores_match_a_per_item_loop_and_batch_size(model, tok, key, shots, max_seq_len):
    cfg = task(key, shots=shots, limit=5)
    items = load_task(cfg)
    ref = reference_logprobs(model, tok, cfg, max_seq_len)
    b1 = item_scores(model, tok, cfg, items, torch.device("cpu"), 1, max_seq_len)
    b8 = item_scores(model, tok, cfg, items, torch.device("cpu"), 8, max_seq_len)
    assert len(b1) == 5
    for r, s1, s8 in zip(ref, b1, b8):
        assert s1.logprobs == pytest.approx(r, abs=1e-4)
        # batch size 1 vs 8: every score equal to 1e-6 (absolute), greedy flags identical
        assert s8.logprobs == pytest.approx(s1.logprobs, abs=1e-6, rel=0)
        assert s8.greedy == s1.greedy
    # the summary is computed from those scores
    res = score_task(model, tok, cfg, torch.device("cpu"), 8, max_seq_len)
    assert res["name"] == key and res["shots"] == shots and res["n"] == 5
    if key == "lambada":
        assert res["mean_logprob"] == pytest.approx(sum(r[0] for r in ref) / 5, abs=1e-4)
        assert res["acc"] == sum(s.greedy[0] for s in b1) / 5 and "acc_norm" not in res
    else:
        acc = sum(max(range(len(r)), key=lambda j: r[j]) == it.gold for r, it in zip(ref, items)) / 5
        assert res["acc"] == pytest.approx(acc)
        assert 0 <= res["acc_norm"] <= 1


def test_left_truncation_keeps_the_continuation_and_the_last_context_tokens(model, tok):
    cfg = task("hellaswag", shots=3, limit=2)
    items = load_task(cfg)
    short = item_scores(model, tok, cfg, items, torch.device("cpu"), 4, 40)
    long = item_scores(model, tok, cfg, items, torch.device("cpu"), 4, 256)
    assert short[0].logprobs != long[0].logprobs  # the shots were cut away on the left
    with pytest.raises(TaskError, match="longer than the model's 3-token window"):
        item_scores(model, tok, cfg, items, torch.device("cpu"), 4, 3)


def one_token_model(tok, word: str) -> tuple[torch.nn.Module, int]:
    t = tok.encode(word, add_special_tokens=False).ids
    assert len(t) == 1, t
    logits = torch.full((tok.get_vocab_size(),), -10.0)
    logits[t[0]] = 0.0
    return ContextFreeModel(logits), t[0]


def test_toy_model_gets_the_predicted_accuracy(tmp_path, tok):
    """A model that always puts most mass on " the" picks the choice made of " the" tokens."""
    toy, _ = one_token_model(tok, " the")
    rows = []
    for i in range(8):  # six items whose answer is "the the ...", two whose answer is not
        the, other = "the " * (1 + i % 3) + "the", f"cat number {i} sat"
        gold = i % 2
        sols = [the, other] if gold == 0 else [other, the]
        if i >= 6:
            sols = sols[::-1]
        rows.append({"goal": f"Goal {i}.", "sol1": sols[0], "sol2": sols[1], "label": gold})
    path = tmp_path / "toy_piqa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for shots in (0, 2):
        res = score_task(toy, tok, TaskConfig(name="toy", path=str(path), format="piqa", shots=shots),
                         torch.device("cpu"), 3, 64)
        assert (res["acc"], res["acc_norm"], res["n"]) == (0.75, 0.75, 8)

    texts = [f"Story {i} ends with the" for i in range(5)] + [f"Story {i} ends with a cat" for i in range(3)]
    path = tmp_path / "toy_lambada.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    res = score_task(toy, tok, TaskConfig(name="lb", path=str(path), format="lambada", limit=6),
                     torch.device("cpu"), 4, 64)
    assert res["acc"] == 5 / 6 and res["n"] == 6
    p_the = torch.log_softmax(toy.logits.detach(), -1)
    cat = tok.encode(" cat", add_special_tokens=False).ids
    expect = (5 * float(p_the.max()) + float(p_the[cat].sum())) / 6
    assert res["mean_logprob"] == pytest.approx(expect, abs=1e-5)


def test_the_packaged_demo_tasks_load_by_package_path():
    from tokenmill.config import load_config
    from tokenmill.cli import demo_config_path
    from tokenmill.eval.tasks import load_task, task_path

    cfg = load_config(demo_config_path())
    assert [t.name for t in cfg.eval.tasks] == ["python-mc", "python-cloze", "quiz-qa", "python-code"]
    sizes = {"python-mc": 12, "python-cloze": 12, "quiz-qa": 149, "python-code": 30}
    for t in cfg.eval.tasks:
        assert task_path(t.path).is_file()
        items = load_task(t)
        assert len(items) == sizes[t.name]
    assert task_path("data/x.jsonl").as_posix() == "data/x.jsonl"


@pytest.mark.parametrize("fmt, name", [("arc", "t.jsonl"), ("bigbench", "task.json"), ("mmlu", "m_test.csv")])
def test_task_file_over_its_size_cap_is_refused_before_it_is_read(tmp_path, fmt, name):
    """The file is not valid in any layout: the size refusal, not a parse error, proves nothing was read."""
    path = tmp_path / name
    path.write_bytes(b"\xff not a task " * 100)
    with pytest.raises(TaskError) as exc:
        load_task(TaskConfig(name="big", path=str(path), format=fmt, max_bytes=1000))
    assert str(exc.value) == (f"{path}: task 'big' is 1,300 bytes, over the 1,000-byte cap "
                              "(raise eval.tasks[].max_bytes to read it)")


def test_jsonl_task_line_over_its_cap_is_one_error_naming_the_line(tmp_path):
    good = (FIXTURES / FILES["arc"]).read_text().splitlines()
    path = tmp_path / "arc.jsonl"
    path.write_text("\n".join(good[:2] + ['{"question": "' + "q" * 5000 + '"}'] + good[2:]) + "\n")
    with pytest.raises(TaskError, match=r"arc.jsonl:3: line longer than 4,096 bytes \(task 'a': eval.tasks\[\].max_line_bytes\)"):
        load_task(TaskConfig(name="a", path=str(path), format="arc", max_line_bytes=4096))
    path.write_text("\n".join(good) + "\n")  # the same items without the long line: read as before
    assert len(load_task(TaskConfig(name="a", path=str(path), format="arc", max_line_bytes=4096))) == len(good)


def test_eval_files_are_checked_before_a_run_starts(tmp_path):
    from tokenmill.eval.config import EvalConfig
    from tokenmill.eval.tasks import check_eval_files

    check_eval_files(EvalConfig.model_validate({"tasks": [{"name": "code", "path": "package:tasks/python_code.jsonl",
                                                           "format": "jsonl"}]}))
    with pytest.raises(TaskError, match=r"quiz.jsonl: eval.tasks 'quiz': no such file"):
        check_eval_files(EvalConfig.model_validate({"tasks": [{"name": "quiz", "path": str(tmp_path / "quiz.jsonl"),
                                                               "format": "jsonl"}]}))
    with pytest.raises(TaskError, match=r"p.txt: eval.probes 'p': no such file"):
        check_eval_files(EvalConfig.model_validate({"probes": [{"name": "p", "path": str(tmp_path / "p.txt")}]}))


def test_a_task_file_over_its_cap_is_refused_before_a_run_starts(tmp_path):
    from tokenmill.eval.config import EvalConfig
    from tokenmill.eval.tasks import check_eval_files

    (tmp_path / "big.jsonl").write_bytes(b"x" * 2000)
    cfg = EvalConfig.model_validate({"tasks": [{"name": "big", "path": str(tmp_path / "big.jsonl"), "format": "jsonl",
                                                "max_bytes": 1000}]})
    with pytest.raises(TaskError, match=r"big.jsonl: task 'big' is 2,000 bytes, over the 1,000-byte cap"):
        check_eval_files(cfg)


def test_normalised_accuracy_follows_lm_evals_definitions(tmp_path, model, tok):
    """acc_norm divides by the characters of the choice, acc_bytes by its UTF-8 bytes, the choice
    without the leading space (lm-eval's doc_to_choice; winogrande: the filled-in context). Each
    item's log-likelihoods, gold and picks are in `items`."""
    import numpy as np

    texts = [["café au lait", "tea", "naïve water", "milk"], ["東京", "Tokyo", "Kyoto", "京都市"],
             ["über", "over", "à la carte", "x"], ["résumé", "CV", "ça va", "déjà vu"]] * 3
    recs = [{"question": f"Pick {i}?", "choices": {"text": t, "label": list("ABCD")}, "answerKey": "ABCD"[i % 4]}
            for i, t in enumerate(texts)]
    path = tmp_path / "unicode_arc.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
    res = score_task(model, tok, TaskConfig(name="u", path=str(path), format="arc"), torch.device("cpu"), 8, 256)
    assert [row["line"] for row in res["items"]] == list(range(1, 13)) and res["n"] == 12
    old = 0  # items the former byte-of-" "+choice normalisation picks differently
    for i, (row, t) in enumerate(zip(res["items"], texts)):
        lls = np.array(row["logprobs"])
        assert row["pick"] == int(np.argmax(lls)) and row["gold"] == i % 4
        assert row["pick_norm"] == int(np.argmax(lls / [len(c) for c in t]))
        assert row["pick_bytes"] == int(np.argmax(lls / [len(c.encode()) for c in t]))
        old += row["pick_norm"] != int(np.argmax(lls / [len((" " + c).encode()) for c in t]))
    for metric, key in (("acc", "pick"), ("acc_norm", "pick_norm"), ("acc_bytes", "pick_bytes")):
        assert res[metric] == sum(row[key] == row["gold"] for row in res["items"]) / 12
    assert old > 0  # the data tells the definitions apart
    wino = load_task(task("winogrande"))
    scores = item_scores(model, tok, task("winogrande"), wino, torch.device("cpu"), 8, 256)
    assert [s.n_chars for s in scores] == [[len(c) for c in it.contexts] for it in wino]
    assert json.loads(json.dumps(res)) == res  # eval/<step>.json stores it as it is
