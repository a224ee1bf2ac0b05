"""The page of a mixture optimization (`tokenmill mixture optimize`): the weights each method
found, DoReMi's domain weights and excess losses over the proxy's steps, the sampled mixtures with
the fitted data mixing law, and the measured comparison. Self-contained HTML in report.html's
style, written beside optimize.json."""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Any

from tokenmill import __version__
from tokenmill.report.page import CSS, table
from tokenmill.report.charts import bar_chart, line_chart
from tokenmill.runs import atomic_write_text


def _per_bucket(hist: dict[str, Any], key: str) -> dict[str, tuple[list[float], list[float]]]:
    return {
        b: (hist["steps"], [row[i] for row in hist[key]]) for i, b in enumerate(hist["buckets"]) if hist[key] and hist[key][0]
    }


def section_weights(result: dict[str, Any]) -> str:
    buckets = result["buckets"]
    total = sum(result["available_tokens"].values())
    rows = [
        ["training tokens", *(f"{result['available_tokens'][b]:,}" for b in buckets)],
        ["token-proportional", *(result["available_tokens"][b] / total for b in buckets)],
        ["uniform", *(1 / len(buckets) for _ in buckets)],
    ]
    for m in ("doremi", "regmix"):
        if m in result:
            rows.append([m + (" (chosen)" if result.get("chosen") == m else ""), *(result[m]["weights"][b] for b in buckets)])
    return (
        "<h2>Weights</h2>"
        + table(["", *buckets], rows)
        + (f"<p>Written to <code>{html.escape(result.get('optimized', ''))}</code> as a <code>mixture:</code> section.</p>")
    )


def section_doremi(d: dict[str, Any]) -> str:
    proxy, ref = d["proxy"], d["reference"]
    shares = ", ".join(f"{b} {w:.3f}" for b, w in d["reference_weights"].items())
    out = [
        f"<h2>DoReMi</h2><p>Reference model on {html.escape(shares)}, then the Group-DRO "
        f"proxy: {d['steps']:,} steps each, {d['tokens_per_model']:,} tokens per model. Weights are the average of "
        "the domain weights α<sub>t</sub> over the proxy's steps.</p>",
        line_chart(_per_bucket(proxy, "weights"), title="Domain weights α_t", xlabel="proxy step", ylabel="weight"),
        line_chart(
            _per_bucket(proxy, "excess"),
            title="Excess loss over the reference (clipped at 0)",
            xlabel="proxy step",
            ylabel="nats / token",
        ),
        line_chart(
            {f"{b} (reference)": xy for b, xy in _per_bucket(ref, "loss").items()}
            | {f"{b} (proxy)": xy for b, xy in _per_bucket(proxy, "loss").items()},
            title="Per-bucket training loss",
            xlabel="step",
            ylabel="nats / token",
        ),
    ]
    return "".join(out)


def section_regmix(d: dict[str, Any], buckets: list[str]) -> str:
    runs = table(
        ["run", *(f"w {b}" for b in buckets), *(f"bpb {b}" for b in buckets), "mean bpb"],
        [[r["name"], *(r["weights"][b] for b in buckets), *(r["bpb"][b] for b in buckets), r["mean_bpb"]] for r in d["runs"]],
    )
    fits = table(
        ["bucket", "c", "k", *(f"t[{b}]" for b in buckets), "rmse", "leave-one-out |error| max"],
        [
            [
                b,
                f["c"],
                f["k"],
                *(f["t"][bj] for bj in buckets),
                f["rmse"],
                max((abs(e) for e in f["loo_errors"] if e == e), default=None),
            ]
            for b, f in d["fits"].items()
        ],
    )
    return (
        "<h2>Data mixing law over sampled mixtures</h2>"
        "<p>L<sub>i</sub>(r) = c<sub>i</sub> + k<sub>i</sub> · exp(Σ<sub>j</sub> t<sub>ij</sub> r<sub>j</sub>) fitted "
        f"to each bucket's held-out bits-per-byte over {len(d['runs'])} proxy runs; the best mixture of the fitted "
        f"laws predicts a mean of {d['predicted_mean_bpb']:.4f} (best sampled run: {html.escape(d['best_sampled'])}, "
        f"{d['best_sampled_mean_bpb']:.4f}).</p>" + fits + "<h3>Proxy runs</h3>" + runs
    )


def section_compare(c: dict[str, Any], buckets: list[str]) -> str:
    names = list(c)
    rows = [
        [
            n,
            *(sum(r["bpb"][b] for r in c[n]["runs"]) / len(c[n]["runs"]) for b in buckets),
            c[n]["mean_bpb"],
            "—" if c[n]["std_bpb"] is None else c[n]["std_bpb"],
            len(c[n]["runs"]),
            ", ".join(f"{b} {e:.2f}" for b, e in c[n].get("epochs", {}).items()),
        ]
        for n in names
    ]
    return (
        "<h2>Measured at the base size</h2><p>Each candidate mixture trained with the base config's model and "
        "budget, one run per seed; held-out bits-per-byte per bucket (mean over seeds) and its mean across "
        "buckets, with the spread over seeds.</p>"
        + table(["mixture", *buckets, "mean bpb", "std over seeds", "seeds", "epochs per bucket"], rows)
        + "<p>Paired by seed (same initialization and data order): mean-bpb difference to the baselines, "
        "mean ± std over seeds.</p>"
        + table(
            ["mixture", "− uniform", "− proportional"],
            [[n, *(_paired(c[n].get("paired", {}).get(base)) for base in ("uniform", "proportional"))] for n in names],
        )
        + bar_chart(
            names,
            {"mean bpb": [c[n]["mean_bpb"] for n in names]},
            title="Mean held-out bpb across buckets",
            ylabel="bits per byte",
        )
    )


def section_confirm(conf: dict[str, Any]) -> str:
    """The chosen mixture and the baselines again on seeds the choice did not see."""
    names = list(conf["runs"])
    rows = [
        [
            n,
            conf["mean_bpb"][n],
            ", ".join(f"{r['mean_bpb']:.4f}" for r in conf["runs"][n]),
            _paired(conf["paired"].get("uniform")) if n == conf["chosen"] else "",
            _paired(conf["paired"].get("proportional")) if n == conf["chosen"] else "",
        ]
        for n in names
    ]
    seeds = ", ".join(str(x) for x in conf["seeds"])
    return (
        f"<h2>Confirmed on fresh seeds</h2><p>The comparison chose {html.escape(conf['chosen'])} on its own "
        "seeds, so its gain there is biased toward the winner. Trained again on seeds "
        f"{html.escape(seeds)}, which the choice did not see: mean held-out bpb across buckets, and "
        f"{html.escape(conf['chosen'])} minus each baseline paired by seed (negative: better).</p>"
        + table(["mixture", "mean bpb", "per seed", "chosen − uniform", "chosen − proportional"], rows)
    )


def _page(title: str, body: list[str]) -> str:
    """A self-contained page in report.html's style: title, version line, the body's sections."""
    head = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p class=muted>tokenmill {__version__} · generated {time.strftime('%Y-%m-%d %H:%M:%S')}</p>",
    ]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)} — tokenmill</title>"
        f"<style>{CSS}</style></head><body>{''.join(head + body)}</body></html>"
    )


def _paired(p: dict[str, Any] | None) -> str:
    if not p or p["mean"] is None:
        return "—"
    return f"{p['mean']:+.4f}" + (f" ± {p['std']:.4f}" if p["std"] is not None else "") + f" ({len(p['per_seed'])})"


def render_mixture_page(result: dict[str, Any], title: str) -> str:
    body = [section_weights(result)]
    if "compare" in result:
        body.append(section_compare(result["compare"], result["buckets"]))
    if "confirm" in result:
        body.append(section_confirm(result["confirm"]))
    if "doremi" in result:
        body.append(section_doremi(result["doremi"]))
    if "regmix" in result:
        body.append(section_regmix(result["regmix"], result["buckets"]))
    return _page(title, body)


def write_mixture_page(out: Path, result: dict[str, Any]) -> Path:
    path = out / "mixture.html"
    atomic_write_text(path, render_mixture_page(result, f"Mixture optimization: {out.name}"))
    return path


# -- tokenmill source-value -------------------------------------------------------------------
def section_source_test(name: str, t: dict[str, Any], source: str) -> str:
    slices = sorted(t["delta_bpb"])
    rows = []
    for arm in ("without", "with"):
        for r in t["runs"][arm]:
            rows.append([f"{arm}, seed {r['seed']}", *(r["bpb"][s] for s in slices), r["mean_bpb"]])
    rows.append(["Δ (with − without), mean over seeds", *(t["delta_bpb"][s] for s in slices), None])
    phases = "; ".join(
        f"{arm}: "
        + " → ".join(
            f"{p['name']} {p['fraction']:.0%} ({', '.join(f'{b} {w:.2f}' for b, w in p['weights'].items())})"
            + (" annealed" if p.get("anneal") else "")
            for p in ph
        )
        for arm, ph in t["phases"].items()
    )
    return (
        f"<h2>{html.escape(name)}: <span class={'good' if t['verdict'] == 'helps' else 'bad' if t['verdict'] == 'hurts' else 'muted'}>"
        f"{html.escape(t['verdict'])}</span></h2><p>{html.escape(phases)}.</p>"
        f"<p>Δ over the slices other than {html.escape(source)}: {t['delta_other_slices']:+.4f} bpb (per seed "
        f"{', '.join(f'{x:+.4f}' for x in t['per_seed'])}); noise band ±{t['noise_band']:.4f}. "
        f"On {html.escape(source)}'s own slice: {t['source_slice']:+.4f}.</p>"
        + table(["run", *(f"bpb {s}" for s in slices), "mean bpb"], rows)
    )


def render_source_value_page(result: dict[str, Any], title: str) -> str:
    body = [f"<p>Source: bucket <b>{html.escape(result['source'])}</b>. Negative Δ bits-per-byte: the source helps.</p>"]
    body += [section_source_test(name, t, result["source"]) for name, t in result["tests"].items()]
    return _page(title, body)


def write_source_value_page(out: Path, result: dict[str, Any]) -> Path:
    path = out / "source_value.html"
    atomic_write_text(path, render_source_value_page(result, f"Marginal value of {result['source']}: {out.name}"))
    return path
