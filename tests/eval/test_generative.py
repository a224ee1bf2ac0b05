"""Generative tasks: stop sequences, batched KV-cached generation against a plain argmax loop,
seeded sampling independent of the batch, lm-eval's exact-match normalisation, and scoring the
shipped quiz set through `score_task` and `run_eval`."""

import json

import pytest
import torch

from tokenmill.config import ModelConfig, TaskConfig, TokenizerConfig
from tokenmill.eval.config import ExactMatchConfig
from tokenmill.eval.generative import cut_at_stop, exact_match, normalize
from tokenmill.eval.tasks import GenItem, TaskError, generate_answers, load_task, prompt_prefix, score_task, task_path
from tokenmill.model.transformer import Transformer
from tokenmill.tokenizer.bpe import train_bpe

from tests.conftest import real_documents

EOS = 0
QUIZ = "package:tasks/quiz_qa.jsonl"
CPU = torch.device("cpu")


def quiz(**kw) -> TaskConfig:
    gen = {"max_new_tokens": 8, "stop": ["\n"], **kw.pop("generation", {})}
    return TaskConfig(name="quiz", path=kw.pop("path", QUIZ), format="jsonl", generation=gen, **kw)


@pytest.fixture(scope="module")
def tok():
    return train_bpe(real_documents()["prose"][:20], TokenizerConfig(vocab_size=400, n_sentinels=0))


@pytest.fixture(scope="module")
def model(tok):
    """An untrained model with every matrix redrawn (N(0, 0.5)): the initialisation's zeroed
    residual outputs would make the next token depend on the last one only, so every answer
    would be the same; these weights write varied text, which is what the equality checks need."""
    cfg = ModelConfig(vocab_size=tok.get_vocab_size(), d_model=32, n_layers=2, n_heads=4, max_seq_len=128)
    m = Transformer(cfg, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m.eval()


# --------------------------------------------------------------------------- stop sequences
def test_stop_sequences_cut_at_the_earliest_stop():
    assert cut_at_stop(" Paris\nQuestion: x", ["\n"]) == (" Paris", True)
    assert cut_at_stop("a, b. c\n", ["\n", ".", ","]) == ("a", True)  # earliest of several, not the first listed
    assert cut_at_stop("\n\nrest", ["\n\n"]) == ("", True)  # a stop at the start leaves an empty answer
    assert cut_at_stop("no stop here", ["\n", "Question:"]) == ("no stop here", False)
    assert cut_at_stop("x\ny", [""]) == ("x\ny", False)  # an empty stop string never matches


def plain_greedy(model, ids: list[int], max_new: int, window: int, stops: list[str], tok) -> str:
    """The reference: argmax of a full forward over the window at every step, no cache, no batch."""
    new: list[int] = []
    with torch.no_grad():
        for _ in range(max_new):
            nxt = int(model(torch.tensor([(ids + new)[-window:]]))[0, -1].argmax())
            if nxt == EOS:
                break
            new.append(nxt)
            if any(s in tok.decode(new) for s in stops):
                break
    return cut_at_stop(tok.decode(new), stops)[0]


def test_greedy_batched_equals_one_at_a_time_equals_a_plain_argmax_loop(model, tok):
    # a window of 40 cuts the one-shot prompts on the left: truncation is exercised too
    cfg = quiz(shots=1, limit=14, generation={"max_new_tokens": 8, "stop": ["\n", "e"]})
    items = load_task(cfg)
    batched = generate_answers(model, tok, cfg, items, CPU, 40, EOS, batch_size=16)
    single = generate_answers(model, tok, cfg, items, CPU, 40, EOS, batch_size=1)
    assert batched == single
    room = 40 - 8
    for i in range(14):
        ids = ([EOS] + tok.encode(prompt_prefix(items, i, 1) + items[i].prompt, add_special_tokens=False).ids)[-room:]
        assert batched[i] == [plain_greedy(model, ids, 8, 40, ["\n", "e"], tok)], i
    texts = [b[0] for b in batched]
    assert all("\n" not in t and "e" not in t for t in texts)  # cut at the stop strings
    assert len(set(texts)) > 5  # varied answers: the comparison above means something


def test_sampling_is_seeded_per_item_and_sample_whatever_the_batch(model, tok):
    cfg = quiz(limit=12, generation={"temperature": 1.0, "samples": 3, "seed": 7})
    items = load_task(cfg)
    runs = [generate_answers(model, tok, cfg, items, CPU, 128, EOS, batch_size=b) for b in (1, 4, 64)]
    assert runs[0] == runs[1] == runs[2]
    fewer = generate_answers(model, tok, quiz(limit=5, generation={"temperature": 1.0, "samples": 3, "seed": 7}), items, CPU, 128, EOS)
    assert fewer == runs[0][:5]  # other items leaving the batch change nothing
    assert all(len(s) == 3 for s in runs[0]) and sum(len(set(s)) > 1 for s in runs[0]) >= 6  # samples differ
    reseeded = generate_answers(model, tok, quiz(limit=12, generation={"temperature": 1.0, "samples": 3, "seed": 8}), items, CPU, 128, EOS)
    assert reseeded != runs[0]


# --------------------------------------------------------------------------- exact match
def _rate(preds: list[str], refs: list[str], **kw) -> float:
    cfg = ExactMatchConfig(**{"strip": False, "ignore_case": False, "ignore_punctuation": False, **kw})
    return sum(exact_match(p, [r], cfg) for p, r in zip(preds, refs)) / len(preds)


def test_normalisation_reproduces_lm_evals_documented_examples():
    # the examples of the exact_match metric lm-evaluation-harness calls (HF evaluate's docstring)
    refs, preds = ["the cat", "theater", "YELLING", "agent007"], ["cat?", "theater", "yelling", "agent"]
    assert _rate(preds, refs) == 0.25
    assert _rate(preds, refs, regexes_to_ignore=["the ", "yell"], ignore_case=True, ignore_punctuation=True) == 0.5
    assert _rate(preds, refs, regexes_to_ignore=["the ", "yell", "YELL"], ignore_case=True, ignore_punctuation=True) == 0.75
    full = dict(regexes_to_ignore=["the ", "yell", "YELL"], ignore_case=True, ignore_punctuation=True, ignore_numbers=True)
    assert _rate(preds, refs, **full) == 1.0
    refs = ["The cat sat on the mat.", "Theaters are great.", "It's like comparing oranges and apples."]
    preds = ["The cat sat on the mat?", "Theaters are great.", "It's like comparing apples and oranges."]
    assert _rate(preds, refs) == pytest.approx(1 / 3)
    # gsm8k's settings: the number after '####', commas and '$' ignored
    gsm = ExactMatchConfig(ignore_punctuation=False, regexes_to_ignore=[",", "\\$", "(?s).*#### ", "\\.$"])
    assert exact_match("so she pays\n#### $1,234.", ["1234"], gsm) and not exact_match("#### 1235", ["1234"], gsm)


def test_the_defaults_are_triviaqas_and_empty_answers_match_only_identical_text():
    cfg = ExactMatchConfig()
    assert normalize("  Port-au-Prince!\n", cfg) == "portauprince"
    assert exact_match(" paris.", [" Rome", " Paris"], cfg)  # any accepted answer
    assert not exact_match(" Parisian", [" Paris"], cfg)
    assert not exact_match("?", ["!"], cfg) and not exact_match("", ["."], cfg)  # both normalise to ""
    assert exact_match("", [""], cfg)


def test_a_regex_that_does_not_compile_is_a_config_error():
    with pytest.raises(ValueError, match="not a regular expression"):
        ExactMatchConfig(regexes_to_ignore=["(unclosed"])


# --------------------------------------------------------------------------- scoring
def test_exact_match_scores_planted_answers(model, tok, tmp_path):
    """Answers planted from what greedy decoding writes: matched items count, the others do not."""
    cfg = quiz(limit=20)
    made = generate_answers(model, tok, cfg, load_task(cfg), CPU, 128, EOS)
    prompts = [it.prompt for it in load_task(cfg)[:20]]
    wordy = [i for i, m in enumerate(made) if m[0].strip().upper() != m[0].strip().lower()][:8]
    assert len(wordy) >= 6
    path = tmp_path / "planted.jsonl"
    rows = [{"prompt": prompts[i], "answer": [" nothing like it", made[i][0].strip().upper() + "!"] if k % 2 else "zzz " + made[i][0]}
            for k, i in enumerate(wordy)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    planted = quiz(path=str(path))
    r = score_task(model, tok, planted, CPU, 16, 128, eos_id=EOS)
    assert [o["match"] for o in r["outputs"]] == [k % 2 == 1 for k in range(len(wordy))]
    assert r["exact_match"] == r["acc"] == (len(wordy) // 2) / len(wordy)
    strict = quiz(path=str(path), exact_match={"ignore_case": False})  # the upper-cased answers no longer match
    assert score_task(model, tok, strict, CPU, 16, 128, eos_id=EOS)["exact_match"] == 0.0


def test_the_shipped_quiz_scores_end_to_end(model, tok):
    cfg = quiz(shots=2)
    r = score_task(model, tok, cfg, CPU, 16, 128, eos_id=EOS)
    items = load_task(cfg)
    assert r["n"] == len(items) == len(r["outputs"]) and 100 <= len(items) <= 200
    assert all(isinstance(it, GenItem) and it.answers and it.answers[0].startswith(" ") for it in items)
    assert [o["line"] for o in r["outputs"]] == list(range(1, len(items) + 1))
    assert all("\n" not in o["output"] for o in r["outputs"])
    again = [exact_match(o["output"], items[k].answers, cfg.exact_match) for k, o in enumerate(r["outputs"])]
    assert [o["match"] for o in r["outputs"]] == again and r["exact_match"] == sum(again) / len(again)


def test_modes_and_item_kinds_are_dispatched_or_refused_with_one_line(model, tok, tmp_path):
    mc = tmp_path / "mc.jsonl"
    mc.write_text(json.dumps({"prompt": "Question: What is the capital of France?\nAnswer:", "choices": ["Paris", "Rome"], "answer": 0}) + "\n")
    asked = score_task(model, tok, quiz(path=str(mc), mode="generate"), CPU, 4, 128, eos_id=EOS)
    assert asked["n"] == 1 and "exact_match" in asked and asked["outputs"][0]["line"] == 1
    assert "acc_norm" in score_task(model, tok, quiz(path=str(mc)), CPU, 4, 128, eos_id=EOS)  # auto: log-likelihood
    with pytest.raises(TaskError, match=r"quiz_qa\.jsonl.*multiple_choice.*generative") as e:
        score_task(model, tok, quiz(mode="multiple_choice"), CPU, 4, 128, eos_id=EOS)
    assert str(task_path(QUIZ)) in str(e.value) and "\n" not in str(e.value)
    code = tmp_path / "code.jsonl"
    code.write_text(json.dumps({"prompt": "def f():\n", "tests": "assert f() == 1\n", "solution": "    return 1\n"}) + "\n")
    cfg = quiz(path=str(code), generation={"samples": 3, "temperature": 1.0, "pass_k": [1, 2], "max_new_tokens": 8})
    scored = score_task(model, tok, cfg, CPU, 4, 128, eos_id=EOS)  # generated, then run in the sandbox
    (row,) = scored["outputs"]
    assert len(row["samples"]) == len(row["verdicts"]) == 3 and scored["n"] == 1
    passed = sum(v["status"] == "passed" for v in row["verdicts"])
    assert row["passed"] == passed and scored["pass@1"] == scored["acc"] == passed / 3
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(mc.read_text() + json.dumps({"prompt": "Q: 2 x 3?\nA:", "answer": "6"}) + "\n")
    with pytest.raises(TaskError, match=r"mixed\.jsonl.*choices from line 1, exact from line 2"):
        score_task(model, tok, quiz(path=str(mixed)), CPU, 4, 128, eos_id=EOS)
    with pytest.raises(TaskError, match="max_new_tokens=128 leaves no room"):
        score_task(model, tok, quiz(generation={"max_new_tokens": 128}), CPU, 4, 128, eos_id=EOS)


def test_evaluations_write_each_generated_answer_beside_the_score(tokenized_run):
    """eval/<step>.json holds the task's score and every item's answer; `tokenmill eval`'s audits
    and the in-training evaluator score the same numbers as score_task."""
    from tokenmill.config import RunConfig
    from tokenmill.eval.evaluate import audits, in_training_evaluator
    from tokenmill.eval.table import tasks_table
    from tokenmill.runs import RunDir
    from tokenmill.tokenizer.bpe import load_tokenizer
    from tokenmill.tokens.store import TokenStore

    data = tokenized_run.config.model_dump()
    data["train"].update(seq_len=64, dtype="float32", eval_docs=1)
    task = {"name": "quiz", "path": QUIZ, "format": "jsonl", "shots": 1, "limit": 10, "generation": {"max_new_tokens": 6, "stop": ["\n"]}}
    data["eval"].update(num_samples=0, memorization_docs=0, tasks=[task])
    run = RunDir.create(RunConfig.model_validate(data), tokenized_run.path)
    store = TokenStore(run.sub("tokens"))
    lm = Transformer(ModelConfig(vocab_size=store.vocab_size, d_model=32, n_layers=1, n_heads=4, max_seq_len=64),
                     generator=torch.Generator().manual_seed(0))
    in_training_evaluator(run)(10, lm)
    record = json.loads(run.sub("eval", "10.json").read_text())
    tok = load_tokenizer(run.sub("tokenizer", "tokenizer.json"))
    direct = score_task(lm.eval(), tok, run.config.eval.tasks[0], CPU, 3, 64, eos_id=store.eos_id, pad_id=store.pad_id)
    assert record["tasks"] == [direct] == audits(run, lm, store, CPU)["tasks"]
    assert len(direct["outputs"]) == 10 and set(direct["outputs"][0]) == {"line", "prompt", "output", "match"}
    assert tasks_table(record) is not None  # the eval table takes a task without acc_norm


def test_pass_k_must_name_at_least_one_k_of_at_least_one():
    from pydantic import ValidationError

    from tokenmill.eval.config import GenerationConfig

    assert GenerationConfig(pass_k=[1, 5]).pass_k == [1, 5]
    for bad in ([], [0], [1, -2]):
        with pytest.raises(ValidationError, match="pass_k"):
            GenerationConfig(pass_k=bad)
