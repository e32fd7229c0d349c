#!/usr/bin/env python3
"""Draws the table perf/multirail.sh prints as a grouped bar chart (SVG, standard library only).

    perf/multirail.sh -R 3 | tee /tmp/multirail.txt
    perf/multirail_svg.py /tmp/multirail.txt docs/img/multirail.svg

One group of bars per case and tool: adaptive, static, best single rail, in MB/s, with the
rate the rails offer (multirail.sh's "available") as a dashed line over the group. A failed
run is drawn as an empty bar marked "fail".
"""
import sys

MODES = [("adaptive", "#2b7bba"), ("static", "#e08a2c"), ("best single rail", "#8c8c8c")]


def parse(path):
    rows = []
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or cells[0] in ("case", "---") or not cells[2].isdigit():
            continue
        vals = [None if v == "fail" else float(v) for v in cells[3:6]]
        rows.append((cells[0], cells[1], float(cells[2]), vals))
    return rows


def draw(rows, out):
    bar, gap, left, top, height = 22, 26, 60, 40, 260
    width = left + len(rows) * (3 * bar + gap) + 20
    vmax = max([r[2] for r in rows] + [v for r in rows for v in r[3] if v is not None]) * 1.1
    y = lambda v: top + height - v / vmax * height
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 60}" '
         'font-family="sans-serif" font-size="11">']
    s.append(f'<text x="{left}" y="18" font-size="13">Bus bandwidth (MB/s), two ranks over shaped veth rails</text>')
    for t in range(0, int(vmax) + 1, 50):
        s.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#eee"/>')
        s.append(f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{t}</text>')
    x = left + gap / 2
    for case, tool, total, vals in rows:
        for k, (name, color) in enumerate(MODES):
            v = vals[k]
            bx = x + k * bar
            if v is None:
                s.append(f'<rect x="{bx}" y="{y(4):.1f}" width="{bar - 3}" height="{y(0) - y(4):.1f}" fill="none" '
                         f'stroke="{color}"/><text x="{bx + bar / 2 - 1}" y="{y(0) - 8:.1f}" text-anchor="middle" '
                         f'font-size="9">fail</text>')
            else:
                s.append(f'<rect x="{bx}" y="{y(v):.1f}" width="{bar - 3}" height="{y(0) - y(v):.1f}" '
                         f'fill="{color}"><title>{name}: {v} MB/s</title></rect>')
        s.append(f'<line x1="{x - 3}" x2="{x + 3 * bar}" y1="{y(total):.1f}" y2="{y(total):.1f}" '
                 'stroke="#000" stroke-dasharray="4 3"/>')
        s.append(f'<text x="{x + 1.5 * bar}" y="{top + height + 16}" text-anchor="middle">{case}</text>')
        s.append(f'<text x="{x + 1.5 * bar}" y="{top + height + 30}" text-anchor="middle">{tool}</text>')
        x += 3 * bar + gap
    lx = left
    for name, color in MODES + [("available", None)]:
        if color:
            s.append(f'<rect x="{lx}" y="{top + height + 42}" width="10" height="10" fill="{color}"/>')
        else:
            s.append(f'<line x1="{lx}" x2="{lx + 10}" y1="{top + height + 47}" y2="{top + height + 47}" '
                     'stroke="#000" stroke-dasharray="4 3"/>')
        s.append(f'<text x="{lx + 14}" y="{top + height + 51}">{name}</text>')
        lx += 20 + 7 * len(name)
    s.append("</svg>")
    open(out, "w").write("\n".join(s) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = parse(sys.argv[1])
    if not rows:
        sys.exit("no table rows in " + sys.argv[1])
    draw(rows, sys.argv[2])
