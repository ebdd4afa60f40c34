"""The task pool paper's clustering planner on its §4.4 real-world setting: which stage count it picks, and the
estimated time of 2, 3 and 4 stages.

    PYTHONPATH=. python experiments/cluster_stages.py [--out docs/figures]

Two numbers per level: the search-time estimate the planner compares (Eq. 2 with DT_k from
Eq. 3) and the re-priced time of the full plan at that level (Eq. 1-2 with the real layer split and
the unreliable clients). Also prints the choice on the task pool paper's cases 1-4.
"""

from __future__ import annotations

import argparse
import json

from experiments._runs import parse_with_out
from labkit.cli.plan import save_chart
from labkit.plan.cluster import plan_cluster
from labkit.plan.presets import preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args, out = parse_with_out(parser)
    s = preset("ps_realworld")
    chosen = plan_cluster(s, max_stages=8)
    rows = []
    for lv in chosen.meta["levels"]:
        plan = plan_cluster(s, stages=lv["stages"])
        groups = [sorted({d.rstrip("0123456789") for d in st.with_role("frontal") + st.with_role("backward")})
                  for st in plan.stages]
        rows.append({"stages": lv["stages"], "criterion_min": lv["time"] / 60, "plan_min": plan.time / 60,
                     "layers": list(plan.layer_split), "servers": ["+".join(g) for g in groups]})
    (out / "cluster_stages.json").write_text(json.dumps(rows))
    print(f"ps_realworld: planner picks {chosen.meta['chosen']} stages\n")
    print("| stages | servers per stage | layers | Eq. 2+3 criterion (min) | re-priced plan, Eq. 1-2 (min) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['stages']} | {' / '.join(r['servers'])} | {r['layers']} | {r['criterion_min']:.0f} | {r['plan_min']:.0f} |")
    best = min(rows[1:4], key=lambda r: r["plan_min"])
    print(f"\namong 2-4 stages the re-priced plan is fastest at {best['stages']} stages")
    print("\nthe task pool paper's cases 1-4 (16 devices):")
    for case in (1, 2, 3, 4):
        p = plan_cluster(preset(f"ps_case{case}"), max_stages=8)
        print(f"  ps_case{case}: picks {p.meta['chosen']} stages, time {p.time / 60:.1f} min, layers {p.layer_split}")
    import altair as alt

    values = [{"stages": r["stages"], "estimate": name, "minutes": r[key]} for r in rows
              for name, key in (("criterion (Eq. 2+3)", "criterion_min"), ("re-priced plan (Eq. 1-2)", "plan_min"))]
    chart = alt.Chart(alt.Data(values=values), title="task pool paper §4.4: time per batch vs stage count").mark_line(
        point=True).encode(x="stages:O", y=alt.Y("minutes:Q", title="minutes per batch"), color="estimate:N")
    print(f"\nchart: {save_chart(chart, out / 'cluster_stages', fallback='.vl.json')}")


if __name__ == "__main__":
    main()
