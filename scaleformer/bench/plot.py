"""Log-log plots of the results: encoder time, end-to-end generation time and inference memory vs N.

Truncated sizes are drawn as hollow markers (the method stopped reading there), error bars span
each timing's interquartile range, and a line's legend gives its fitted exponent and range.
"""

from __future__ import annotations

import io
from typing import Any

from scaleformer.bench.summary import cells_of, max_beams, metric, truncated


def _n(n: int) -> str:
    return f"{n // 1048576}M" if n % 1048576 == 0 else f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _iqr(cell: dict[str, Any], key: str, beams: str) -> tuple[float, float] | None:
    """(low, high) error of a timing around its median, from the quartiles (None for memory)."""
    if key == "encode_s":
        parts = [cell.get("encode") or {}]
    elif key == "generate_e2e_s":
        parts = [cell.get("encode") or {}, ((cell.get("generate") or {}).get(beams)) or {}]
    else:
        return None
    if any(p.get("time_p25_s") is None for p in parts):
        return None
    med = sum(p["time_s"] for p in parts)
    return med - sum(p["time_p25_s"] for p in parts), sum(p["time_p75_s"] for p in parts) - med


def plot(doc: dict[str, Any]) -> bytes:
    """The figure as PNG bytes (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    beams = max_beams(doc)
    panels = (("encode_s", "encoder time (s)"), ("generate_e2e_s", f"encode + {beams}-beam generation (s)"),
              ("mem_inference_bytes", "peak inference memory growth (bytes)"))
    backbones = doc["grid"]["backbones"]
    names = list(dict.fromkeys(m["method"] for m in doc["methods"] if m["status"] == "ran"))
    colours = plt.get_cmap("tab20")
    style = {m: (colours(i % 20), "osD^v<>ph*"[i % 10], ("-", "--", ":")[i // 10 % 3]) for i, m in enumerate(names)}
    fig, axes = plt.subplots(len(backbones), 3, figsize=(18, 6.5 * len(backbones)), squeeze=False)
    for row, backbone in enumerate(backbones):
        for col, (key, label) in enumerate(panels):
            ax = axes[row][col]
            for m in doc["methods"]:
                if m["backbone"] != backbone or m["status"] != "ran":
                    continue
                pts = [(n, metric(c, key, beams), truncated(c, key), _iqr(c, key, beams))
                       for n, c in sorted(cells_of(doc, backbone, m["method"]).items())]
                pts = [p for p in pts if p[1] is not None and p[1] > 0]
                if not pts:
                    continue
                fit = (m.get("scaling") or {}).get(key)
                tag = f" (slope {fit['exponent']:.2f}, {_n(fit['range'][0])}..{_n(fit['range'][1])})" if fit else ""
                c, mk, ls = style[m["method"]]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c, linestyle=ls, label=m["method"] + tag)
                for n, v, cut, err in pts:
                    ax.plot([n], [v], marker=mk, color=c, markerfacecolor="none" if cut else c)
                    if err is not None:
                        ax.errorbar([n], [v], yerr=[[err[0]], [err[1]]], color=c, capsize=2, linewidth=0.8)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            sizes = doc["grid"]["sizes"]
            ax.set_xticks(sizes, [_n(n) for n in sizes], fontsize=8)
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.set_xlabel("input tokens N (hollow marker: truncated input)")
            ax.set_title(f"{backbone}: {label}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    fig.suptitle(f"benchmark {doc['profile']} on {doc['environment']['device_name']}", fontsize=11)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()
