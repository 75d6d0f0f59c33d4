"""Rewrite the table of runs in docs/evidence/gpu-pipeline.md from the records in docs/evidence/gpu-pipeline/*.json
(written by bench/gpu_pipeline.sh). Usage: python3 bench/gpu_pipeline_table.py"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "evidence" / "gpu-pipeline.md"
BEGIN, END = "<!-- runs: begin (bench/gpu_pipeline_table.py) -->", "<!-- runs: end -->"
HEAD = ("| record | GPU | driver | torch | steps ok | first step cold / warm (ratio) | throughput tool / by hand "
        "(ratio) | doctor named | known-good / recovered (ratio) | GPU after stop |\n"
        "|---|---|---|---|---|---|---|---|---|---|")


def fmt(x, digits=1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def row(path: Path) -> str:
    r = json.loads(path.read_text())
    steps = r.get("steps", [])
    ok = sum(1 for s in steps if s["ok"])
    failed = [s["name"] for s in steps if not s["ok"]]
    ratios = r.get("ratios", {})
    replay = r.get("replay", {})
    freed = r.get("gpu_freed", {})
    after = freed.get("processes_after_stop")
    gpu_after = ("no process" if after == "" else f"processes {after}" if after else "-") + (
        f", {freed.get('mem_after_stop_mib')} MiB (idle {freed.get('idle_mem_mib')})" if freed.get("idle_mem_mib") else "")
    named = replay.get("polluted", {})
    return (f"| [{path.stem}](gpu-pipeline/{path.name}) | {r.get('gpu') or '-'} | {r.get('driver') or '-'} | "
            f"{r.get('torch') or '-'} | {ok}/{len(steps)}" + (f" (not ok: {', '.join(failed)})" if failed else "")
            + f" | {fmt(r.get('first_step_cold_s'))} s / {fmt(r.get('first_step_warm_s'))} s "
            f"({fmt(ratios.get('warm_over_cold'), 2)}) | {fmt(r.get('throughput_tool'))} / "
            f"{fmt(r.get('throughput_by_hand'))} {r.get('unit', '')} ({fmt(ratios.get('tool_over_hand'), 3)}) | "
            f"{'yes' if replay.get('doctor_named') else 'no'}"
            + (f" (missed: {', '.join(named.get('missed', []))})" if named.get("missed") else "")
            + f" | {fmt(replay.get('baseline'))} / {fmt(replay.get('recovered'))} "
            f"({fmt(ratios.get('recovered_over_baseline'), 3)})"
            + (f", medians of {replay['median_of']}" if replay.get("median_of") else "") + f" | {gpu_after} |")


def main() -> int:
    # <date>.json, then <date>-2.json, ...: in the order they ran.
    records = sorted((ROOT / "docs" / "evidence" / "gpu-pipeline").glob("*.json"),
                     key=lambda p: (p.stem[:10], int(p.stem[11:] or 1) if p.stem[11:].isdigit() else 0))
    table = "\n".join([BEGIN, HEAD, *(row(p) for p in records), END])
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        print(f"{DOC}: no {BEGIN} ... {END} section to rewrite", file=sys.stderr)
        return 1
    DOC.write_text(text[:text.index(BEGIN)] + table + text[text.index(END) + len(END):])
    print(f"{DOC}: {len(records)} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
