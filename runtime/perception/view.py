"""Whether a camera frame can be trusted to show what is there: a view too dark or too
blurred says nothing about what is absent, so what it does not show is *unknown*, not gone.

Measured on the twin's renders (2026-12-04): its scenes' 95th-percentile brightness is 171-202
lit as shipped and 22-26 with the lights down to an eighth; the sharpness ratio (the variance
of the Laplacian over the variance of the grey image) is 0.24-0.40 sharp, 0.012-0.025 after a
3-pixel box blur (which the detector still reads) and 0.004-0.007 after a 5-pixel one. The
hard evaluation set's darkest exposure (one stop down) stays far above :data:`DARK`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["BLURRED", "DARK", "view_problem"]

#: a frame whose 95th-percentile brightness (0-255) is below this is too dark
DARK = 50.0
#: a frame whose sharpness ratio is below this is too blurred
BLURRED = 0.008


def view_problem(color: npt.NDArray[np.uint8]) -> str | None:
    """Why ``color`` (H, W, 3) cannot be trusted ("too dark: ..."), or None."""
    bright = float(np.percentile(color.max(axis=2), 95))
    if bright < DARK:
        return f"too dark (brightness {bright:.0f} of 255, below {DARK:.0f})"
    grey = color.astype(np.float32).mean(axis=2)
    spread = float(grey.var())
    lap = 4 * grey[1:-1, 1:-1] - grey[:-2, 1:-1] - grey[2:, 1:-1] - grey[1:-1, :-2] - grey[1:-1, 2:]
    sharpness = float(lap.var()) / max(spread, 1e-6)
    if spread > 1.0 and sharpness < BLURRED:
        return f"too blurred (sharpness {sharpness:.4f}, below {BLURRED})"
    return None
