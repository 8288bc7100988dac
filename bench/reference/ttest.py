#!/usr/bin/env python3
"""Reference values for Kiln's welch_t_test and proportion_z_test.

Prints, for the fixed datasets below (the same ones that
crates/kiln-query/tests/scipy_reference.rs loads into Kiln), the values that
test asserts against:

- Welch's t-test: scipy.stats.ttest_ind(treatment, control, equal_var=False)
  and its confidence_interval(0.95) for mean(treatment) - mean(control);
- two-proportion z-test: pooled standard error for z and the two-sided p
  (scipy.stats.norm.sf), unpooled standard error for the 95% CI.

Run: pip install scipy && python3 bench/reference/ttest.py
"""

import math

import numpy as np
from scipy import stats

WELCH = {
    "small": (
        [12.1, 14.3, 11.8, 13.5, 12.9, 15.2, 10.7, 13.0],
        [14.2, 15.1, 13.8, 16.4, 12.9, 15.7, 14.9],
    ),
    "unequal": (
        [100.0, 102.5, 98.25, 101.0, 99.5, 100.75, 97.0, 103.25, 100.5, 99.0, 101.5, 98.75],
        [104.0, 90.5, 112.25, 99.0, 108.5],
    ),
}

# (control converted, control n, treatment converted, treatment n)
PROPORTION = {
    "small": (9, 40, 14, 35),
    "large": (412, 5000, 468, 5100),
}


def welch(control, treatment):
    c, t = np.asarray(control), np.asarray(treatment)
    res = stats.ttest_ind(t, c, equal_var=False)
    ci = res.confidence_interval(0.95)
    return {
        "control_mean": c.mean(),
        "treatment_mean": t.mean(),
        "diff": t.mean() - c.mean(),
        "t": res.statistic,
        "df": res.df,
        "p_value": res.pvalue,
        "ci_low": ci.low,
        "ci_high": ci.high,
    }


def proportion(xc, nc, xt, nt):
    pc, pt = xc / nc, xt / nt
    pooled = (xc + xt) / (nc + nt)
    se_pooled = math.sqrt(pooled * (1 - pooled) * (1 / nc + 1 / nt))
    z = (pt - pc) / se_pooled
    se = math.sqrt(pc * (1 - pc) / nc + pt * (1 - pt) / nt)
    q = stats.norm.ppf(0.975)
    return {
        "control_rate": pc,
        "treatment_rate": pt,
        "diff": pt - pc,
        "z": z,
        "p_value": 2 * stats.norm.sf(abs(z)),
        "ci_low": pt - pc - q * se,
        "ci_high": pt - pc + q * se,
    }


if __name__ == "__main__":
    import scipy

    print(f"# scipy {scipy.__version__}, numpy {np.__version__}")
    for name, (c, t) in WELCH.items():
        for k, v in welch(c, t).items():
            print(f"welch {name} {k} = {float(v)!r}")
    for name, args in PROPORTION.items():
        for k, v in proportion(*args).items():
            print(f"proportion {name} {k} = {float(v)!r}")
