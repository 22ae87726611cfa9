"""Colours of the attention pictures: one colour per head, and the colour maps of the weights."""

# One colour per head, chosen so that any two of the 12 stay apart (CIE76 Delta-E >= 25 in
# Lab) for normal vision and under simulated protanopia, deuteranopia and tritanopia (Machado
# et al. 2009), each with contrast >= 2 against white so thin lines stay visible
# (tests/unit/test_viz_data.py measures this). Heads 12-23 reuse the colours with dashed lines.
HEAD_COLORS = [
    "#0000ff", "#ff9600", "#00c3a5", "#d22d5a", "#a54bff", "#966900",
    "#004b1e", "#f087ff", "#87005a", "#7878a5", "#c3b469", "#5a00a5",
]  # fmt: skip
HEATMAP_CMAP = "viridis"  # sequential and colour-blind safe
DIVERGING_CMAP = "RdBu_r"  # for signed numbers (q, k, q*k): blue < 0 < red, colour-blind safe


def head_style(head):
    """A head's colour and whether its lines are dashed (heads past the palette's 12)."""
    return HEAD_COLORS[head % len(HEAD_COLORS)], (head // len(HEAD_COLORS)) % 2 == 1
