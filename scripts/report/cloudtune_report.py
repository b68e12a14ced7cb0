#!/usr/bin/env python3
"""Draws the plots of `cloudtune report` and writes them into one self-contained HTML file.

Input: the JSON document the C++ `cloudtune report` command prepares (--data FILE): either
{"kind": "sidecar", "records": [...], "problems": [...], "rerun": {...}, "state": {...}} or
{"kind": "replay", "replay": {...}}. Output: the HTML file (-o) with every plot inlined as SVG
(matplotlib, Agg backend; no network, no JavaScript), and a five-line human summary on stdout.
"""
import argparse
import html
import io
import json
import math
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("cloudtune report: python3-matplotlib is missing (apt-get install python3-matplotlib)")

matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.grid": True,
                            "grid.alpha": 0.3, "figure.dpi": 100})

CSS = """body{font-family:sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:left;font-size:.9em}th{background:#f2f2f2}.warn{background:#fff4d6;padding:.5em 1em;
border-left:4px solid #e0a800}.plot svg{max-width:100%;height:auto}.muted{color:#777}"""


def esc(x):
    return html.escape(str(x))


def svg(fig):
    """The figure as an inline <svg> element (the XML prolog and DOCTYPE dropped)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return '<div class="plot">' + text[text.find("<svg"):] + "</div>"


def fmt(v, spec=".3g", unit=""):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "?"
    if isinstance(v, dict):  # e.g. missed runs per policy
        return ", ".join(f"{k} {fmt(x, spec, unit)}" for k, x in v.items()) or "none"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return format(v, spec) + unit


def table(head, rows):
    """An HTML table; head None = a key/value table without a header row."""
    out = ["<table>" + ("<tr>" + "".join("<th>%s</th>" % esc(h) for h in head) + "</tr>"
                        if head else "")]
    for r in rows:
        out.append("<tr>" + "".join("<td>%s</td>" % esc(c) for c in r) + "</tr>")
    return "".join(out) + "</table>"


def money(v, rec, hi=False):
    """A cost (or the range v-hi) in the recommendation's unit: dollars, or GPU-hours on machines
    no catalog prices."""
    text = fmt(v) if hi is False else "%s-%s" % (fmt(v), fmt(hi))
    return text + " GPU-h" if (rec or {}).get("cost_unit") == "gpu_hours" else "$" + text


def config_text(c):
    if not c:
        return "?"
    return "%dx %s, %d replicas, batch %d" % (c.get("num_nodes", 0), c.get("instance_type", "?"),
                                              c.get("num_replicas", 0), c.get("global_batch", 0))


# ---- the sidecar report ------------------------------------------------------------------------


def kinds(records, kind):
    return [r for r in records if r.get("kind") == kind]


def summary(d, recs):
    """(html table, five summary lines)."""
    rerun = d.get("rerun")
    last = (recs[-1] if recs else None) or rerun
    meas = kinds(d["records"], "measurement")
    end = kinds(d["records"], "end")
    steps = (end[-1]["steps"] if end else (meas[-1]["step"] if meas else 0))
    lines = []
    rows = []
    if last:
        p, c = last.get("proposed", {}), last.get("current", {})
        action = last.get("action", "?")
        rows.append(("what to do next", "%s: %s" % (action, p.get("description", "?"))))
        rows.append(("why", last.get("reason", "")))
        rows.append(("predicted to finish (recommended)", "%s h, %s (range %s-%s h, %s)" % (
            fmt(p.get("hours")), money(p.get("cost_usd"), last),
            fmt((p.get("hours_range") or [None])[0]), fmt((p.get("hours_range") or [None, None])[1]),
            money((p.get("cost_range") or [None])[0], last,
                   (p.get("cost_range") or [None, None])[1]))))
        rows.append(("staying put", "%s h, %s" % (fmt(c.get("hours")),
                                                  money(c.get("cost_usd"), last))))
        if c.get("cost_usd") and p.get("cost_usd") is not None and c.get("hours"):
            save_usd = c["cost_usd"] - p["cost_usd"]
            save_h = c["hours"] - p["hours"]
            rows.append(("saving against staying put", "%s (%s%%), %s h" % (
                money(save_usd, last), fmt(100 * save_usd / c["cost_usd"], ".1f"), fmt(save_h))))
        lines.append("next: %s -> %s" % (action, p.get("description", "?")))
        lines.append("finish: %s h, %s recommended vs %s h, %s staying put" % (
            fmt(p.get("hours")), money(p.get("cost_usd"), last), fmt(c.get("hours")),
            money(c.get("cost_usd"), last)))
        lines.append("why: %s" % last.get("reason", ""))
    else:
        rows.append(("what to do next", "no recommendation yet"))
        lines += ["next: no recommendation yet", "finish: unknown", "why: -"]
    progress = meas[-1].get("step") if meas else 0
    target = last.get("target_progress") if last else None
    rows.append(("run", "%s steps, %d measurement(s), %d recommendation(s)%s" % (
        steps, len(meas), len(recs), "" if end else " (no end record)")))
    lines.append("run: %s steps, %d measurements, %d recommendations, progress %s of %s" % (
        steps, len(meas), len(recs), fmt(last.get("progress") if last else progress, ".0f"),
        fmt(target, ".0f")))
    probs = d.get("problems") or []
    lines.append("problems: " + ("; ".join(probs) if probs else "none, the sidecar is complete"))
    return table(None, rows), lines


def changes(meas):
    """Steps where the configuration changed."""
    out, prev = [], None
    for m in meas:
        key = json.dumps(m.get("config"), sort_keys=True)
        if prev is not None and key != prev:
            out.append(m["step"])
        prev = key
    return out


def plot_step_time(meas, recs):
    fig, ax = plt.subplots(figsize=(10, 3.2))
    steps = [m["step"] for m in meas]
    comp = [m["compute_time"]["mean"] * 1e3 for m in meas]
    sync = [m["sync_time"]["mean"] * 1e3 for m in meas]
    ax.stackplot(steps, comp, sync, labels=["compute", "exposed communication"],
                 colors=["#4c72b0", "#dd8452"], alpha=0.85, step="post")
    for i, s in enumerate(changes(meas)):
        ax.axvline(s, color="k", ls="--", lw=0.8, label="configuration change" if i == 0 else None)
    for i, r in enumerate(recs):
        ax.axvline(r["step"], color="#2ca02c", ls=":", lw=1,
                   label="recommendation" if i == 0 else None)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("ms per step")
    ax.set_title("Step time: compute and exposed communication")
    ax.legend(loc="upper right", fontsize=8)
    return svg(fig)


def plot_throughput(meas):
    fig, ax = plt.subplots(figsize=(10, 3))
    steps = [m["step"] for m in meas]
    thr = [m.get("samples_per_second") or float("nan") for m in meas]
    good = []
    for m, t in zip(meas, thr):
        b = m["config"].get("global_batch") or 1
        phi, b0 = m.get("noise_scale"), m.get("base_batch") or b
        # Statistical efficiency of batch b vs b0 (McCandlish et al.): (phi + b0) / (phi + b).
        good.append(t * (phi + b0) / (phi + b) if phi else float("nan"))
    ax.plot(steps, thr, marker=".", label="throughput (samples/s)")
    ax.plot(steps, good, marker=".", label="goodput (samples/s at base-batch efficiency)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("samples/s")
    ax.set_title("Throughput and goodput")
    ax.legend(fontsize=8)
    return svg(fig)


def plot_noise(meas):
    fig, ax = plt.subplots(figsize=(10, 3))
    steps = [m["step"] for m in meas]
    ax.plot(steps, [m.get("noise_scale") or float("nan") for m in meas], color="#8172b3",
            marker=".", label="gradient noise scale (samples)")
    ax.plot(steps, [m["config"].get("global_batch") for m in meas], color="#c44e52",
            drawstyle="steps-post", label="global batch (samples)")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step (progress)")
    ax.set_ylabel("samples")
    ax.set_title("Noise scale and batch size")
    ax.legend(fontsize=8)
    return svg(fig)


def err(v, rng):
    if not rng or rng[0] is None or rng[1] is None:
        return [0], [0]
    return [max(0, v - rng[0])], [max(0, rng[1] - v)]


def point(ax, e, **kw):
    h, c = e.get("hours"), e.get("cost_usd")
    if h is None or c is None:
        return
    lo_h, hi_h = err(h, e.get("hours_range"))
    lo_c, hi_c = err(c, e.get("cost_range"))
    ax.errorbar([h], [c], xerr=[lo_h, hi_h], yerr=[lo_c, hi_c], capsize=3, **kw)


def plot_pareto(d, last):
    rerun = d.get("rerun") or {}
    front = rerun.get("pareto") or []
    doc = rerun or last
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for i, e in enumerate(front):
        point(ax, e, fmt="o", color="#4c72b0", ms=4, alpha=0.7, elinewidth=0.7,
              label="Pareto front (predicted)" if i == 0 else None)
    if front:
        ax.plot([e["hours"] for e in front], [e["cost_usd"] for e in front], color="#4c72b0",
                lw=0.8, alpha=0.5)
    for i, e in enumerate(doc.get("alternatives") or []):
        point(ax, e, fmt="s", color="#999999", ms=4, elinewidth=0.7,
              label="alternatives" if i == 0 else None)
    if doc.get("current"):
        point(ax, doc["current"], fmt="D", color="#c44e52", ms=7, label="current configuration")
    if doc.get("proposed"):
        point(ax, doc["proposed"], fmt="*", color="#2ca02c", ms=13, label="recommendation")
    opts = (kinds(d["records"], "start") or [{}])[0].get("options", {})
    deadline = float(opts.get("CLOUDTUNE_DEADLINE_HOURS", "0") or 0)
    budget = float(opts.get("CLOUDTUNE_BUDGET_USD", "0") or 0)
    if deadline > 0:
        ax.axvline(deadline, color="#e0a800", ls="--", label="deadline %g h" % deadline)
    if budget > 0:
        ax.axhline(budget, color="#8c564b", ls="--", label="budget $%g" % budget)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted hours to finish")
    ax.set_ylabel("predicted cost to finish (%s)" % (
        "GPU-hours" if (doc or {}).get("cost_unit") == "gpu_hours" else "USD"))
    ax.set_title("Predicted cost vs time at step %s (bars: uncertainty range)" % doc.get("step", "?"))
    ax.legend(fontsize=8, loc="upper right")
    return svg(fig)


def plot_events(d, meas, recs):
    fig, ax = plt.subplots(figsize=(10, 2.6))
    rows = [("measurement", meas, "#4c72b0"), ("recommendation", recs, "#2ca02c"),
            ("preemption", kinds(d["records"], "preemption"), "#c44e52"),
            ("straggler", kinds(d["records"], "straggler"), "#e0a800")]
    for y, (name, rs, color) in enumerate(rows):
        ax.scatter([r.get("step", 0) for r in rs], [y] * len(rs), color=color, s=18,
                   label="%s (%d)" % (name, len(rs)))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("optimizer step")
    ax.set_title("Events: recommendations, preemptions, stragglers")
    return svg(fig)


def sidecar_html(d):
    recs = kinds(d["records"], "recommendation")
    meas = [m for m in kinds(d["records"], "measurement")
            if isinstance(m.get("step_time"), dict) and isinstance(m.get("compute_time"), dict)]
    last = recs[-1] if recs else {}
    top, lines = summary(d, recs)
    parts = ["<h1>cloudtune report</h1><p class='muted'>%s &middot; cloudtune %s</p>" % (
        esc(d["source"]), esc(d.get("version", "?")))]
    probs = d.get("problems") or []
    if probs:
        parts.append("<div class='warn' id='problems'><b>Incomplete sidecar.</b><ul>%s</ul></div>" %
                     "".join("<li>%s</li>" % esc(p) for p in probs))
    parts.append("<h2>Summary</h2>" + top)
    if meas:
        parts.append("<h2 id='step-time'>Step time</h2>" + plot_step_time(meas, recs))
        parts.append("<h2 id='throughput'>Throughput and goodput</h2>" + plot_throughput(meas))
        parts.append("<h2 id='noise'>Noise scale and batch size</h2>" + plot_noise(meas))
    else:
        parts.append("<p class='warn'>No measurement record: no step-time plots.</p>")
    if recs or d.get("rerun"):
        parts.append("<h2 id='pareto'>Cost vs time at the latest recommendation</h2>" +
                     plot_pareto(d, last))
        if d.get("rerun_error"):
            parts.append("<p class='muted'>Pareto front not re-computed: %s</p>" %
                         esc(d["rerun_error"]))
    parts.append("<h2 id='history'>Recommendations and what was applied</h2>")
    rows = []
    for r in recs:
        pc = r.get("proposed", {}).get("config", {})
        # Applied = a later measurement ran the proposed type, replicas and local batch.
        after = [m["step"] for m in meas if m["step"] > r["step"] and
                 m["config"].get("instance_type") == pc.get("instance_type") and
                 m["config"].get("num_replicas") == pc.get("replicas") and
                 m["config"].get("local_bsz") == pc.get("local_bsz")]
        rows.append((r["step"], r.get("trigger", ""), r.get("action", ""),
                     r.get("proposed", {}).get("description", ""),
                     "%s h, %s" % (fmt(r.get("proposed", {}).get("hours")),
                                   money(r.get("proposed", {}).get("cost_usd"), r)),
                     "ran from step %d" % after[0] if after else "not applied"))
    parts.append(table(["step", "trigger", "action", "proposed", "predicted", "applied"], rows)
                 if rows else "<p>No recommendation recorded.</p>")
    parts.append("<h2 id='events'>Preemptions and stragglers</h2>" + plot_events(d, meas, recs))
    ev = [(r["step"], r["kind"], json.dumps({k: v for k, v in r.items() if k not in (
        "schema", "time", "step", "kind", "line")}, sort_keys=True)[:200])
          for r in d["records"] if r.get("kind") in ("preemption", "straggler")]
    parts.append(table(["step", "kind", "details"], ev) if ev else
                 "<p>No preemption and no straggler recorded.</p>")
    if d.get("state"):
        st = d["state"]
        parts.append("<h2 id='state'>Saved state</h2>" + table(None, [
            ("file", st.get("source", "")), ("saved at", st.get("saved_at", "")),
            ("step", st.get("step", "")), ("progress", fmt(st.get("progress"), ".1f")),
            ("configurations in profile", len(st.get("profile", [])))]))
    return "\n".join(parts), lines


# ---- the replay report -------------------------------------------------------------------------


def replay_html(d):
    rp = d["replay"]
    runs = rp.get("runs", [])
    parts = ["<h1>cloudtune replay report</h1><p class='muted'>%s &middot; cloudtune %s</p>" % (
        esc(d["source"]), esc(d.get("version", "?")))]
    pols = {}
    for r in runs:
        for p in r.get("policies", []):
            pols.setdefault(p["policy"], []).append(p)
    names = list(pols)
    med = {n: sorted(p.get("cost_vs_oracle") or float("nan") for p in pols[n]) for n in names}
    med = {n: v[len(v) // 2] if v else float("nan") for n, v in med.items()}
    s = rp.get("summary", {})
    parts.append("<h2>Summary</h2>" + table(None, [(k, fmt(v)) for k, v in s.items()]))
    fig, ax = plt.subplots(figsize=(10, 3.5))
    ax.bar(names, [med[n] for n in names], color=["#2ca02c" if n == "cloudtune" else "#999999"
                                                  for n in names])
    ax.axhline(1, color="k", ls="--", lw=0.8, label="oracle")
    ax.set_ylabel("cost / oracle cost (median)")
    ax.set_title("Policies against the oracle")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    parts.append("<h2 id='policies'>Policies against the oracle</h2>" + svg(fig))
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for n in names:
        ax.scatter([p.get("makespan_h") for p in pols[n]], [p.get("cost_usd") for p in pols[n]],
                   label=n, s=25)
    ax.set_xlabel("makespan (h)")
    ax.set_ylabel("cost (USD)")
    ax.set_title("Cost vs makespan per run")
    ax.legend(fontsize=8)
    parts.append("<h2 id='runs'>Runs</h2>" + svg(fig))
    rows = [(r.get("scenario", ""), r.get("seed", ""), p["policy"], fmt(p.get("cost_usd")),
             fmt(p.get("cost_vs_oracle")), fmt(p.get("makespan_h")), p.get("switches", ""),
             p.get("finished", "")) for r in runs for p in r.get("policies", [])]
    parts.append(table(["scenario", "seed", "policy", "cost $", "vs oracle", "makespan h",
                        "switches", "finished"], rows))
    best = min(names, key=lambda n: med[n]) if names else "?"
    lines = ["replay: %d run(s), %d policies" % (len(runs), len(names)),
             "cloudtune cost vs oracle (median): %s" % fmt(med.get("cloudtune")),
             "cheapest policy (median vs oracle): %s" % best,
             "saving vs fixed on-demand (median): %s" % fmt(
                 s.get("cloudtune_saving_vs_fixed_median")),
             "exploration share (median): %s" % fmt(s.get("cloudtune_exploration_share_median"))]
    return "\n".join(parts), lines


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True, help="JSON document from `cloudtune report`")
    ap.add_argument("-o", "--output", required=True, help="HTML file to write")
    a = ap.parse_args()
    with open(a.data) as f:
        d = json.load(f)
    body, lines = (replay_html if d.get("kind") == "replay" else sidecar_html)(d)
    page = ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>cloudtune report"
            "</title><style>%s</style></head><body>%s</body></html>\n" % (CSS, body))
    with open(a.output, "w") as f:
        f.write(page)
    print("report: %s" % a.output)
    for line in lines[:5]:
        print(line)


if __name__ == "__main__":
    main()
