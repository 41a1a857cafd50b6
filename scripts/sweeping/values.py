"""Value lists as a grid writes them (`sweep.py --grid`, `evaluate_checkpoint.py --agent_grid`).

Nothing here imports submitit, so a command that only reads such a list does not load the SLURM executor.
"""

import math
import re
from typing import List


def typed(value: str):
    """A grid value as recorded in `--sweep_info`: an int, float or bool when it reads as one, else the text."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        return number if math.isfinite(number) else value
    return value


def split_values(text: str) -> List[str]:
    """The values of one `--grid` list: split on `;` when it has one, else on commas outside brackets.

    `'1,5'` -> `['1', '5']`; `'(256,256),(512,512)'` -> `['(256,256)', '(512,512)']`;
    `'(256,256);(512,512)'` -> the same. Spaces around values are dropped. Raises `ValueError` for an
    empty value, unbalanced brackets or a repeated value.
    """
    if ";" in text:
        values = text.split(";")
    else:
        values, depth, current = [], 0, ""
        for ch in text:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth < 0:
                    break
            if ch == "," and depth == 0:
                values.append(current)
                current = ""
            else:
                current += ch
        if depth != 0:
            raise ValueError(f"unbalanced brackets in the grid values {text!r} (separate values with ';' instead)")
        values.append(current)
    values = [v.strip() for v in values]
    if any(not v for v in values):
        raise ValueError(f"empty value in the grid values {text!r}")
    # The same value spelled twice (8 and 08, 3e-4 and 0.0003, True and true) would launch one run twice.
    seen = {}
    for v in values:
        same = typed(v)
        same = re.sub(r"\s+", "", same) if isinstance(same, str) else same
        if same in seen:
            if seen[same] == v:
                raise ValueError(f"the grid values {text!r} list {v!r} twice")
            raise ValueError(f"the grid values {text!r} list one value twice: {seen[same]!r} and {v!r}")
        seen[same] = v
    return values
