"""A wrong scale or a wrong shape? How the scripts read a set of standardised errors.

z: |log(predicted / measured)| / log_sigma for every held-out prediction. A calibrated Gaussian has
68 % of z within 1 and 95 % within 2. Two different faults give other shares:
- the stated variance is wrong: rms(z) = sqrt(mean(z^2)) is not 1;
- the variance is right but the errors' tails are heavier than a Gaussian's: rms(z) is 1 and the
  shares follow the heavier-tailed law (a Laplace error: 76 % and 94 %).
shape_line() prints rms(z) and the shares a Gaussian and a Laplace error of that variance give,
next to which the measured shares can be read. Standard library only.
"""
import math


def shape(z):
    """(rms, gaussian (<=1, <=2) %, laplace (<=1, <=2) %) for the standardised errors z."""
    rms = math.sqrt(sum(x * x for x in z) / len(z))
    gauss = tuple(100 * math.erf(k / (rms * math.sqrt(2))) for k in (1, 2))
    laplace = tuple(100 * (1 - math.exp(-math.sqrt(2) * k / rms)) for k in (1, 2))
    return rms, gauss, laplace


def shape_line(z):
    """The measured shares within 1 and 2 sigma, rms(z), and the shares of a Gaussian and of a
    Laplace error with that rms, on one line."""
    if not z:
        return "-"
    rms, g, l = shape(z)
    within = [100 * sum(x <= k for x in z) / len(z) for k in (1, 2)]
    return ("within 1/2 sigma %2.0f/%2.0f%%; rms %.2f; of that variance: Gaussian %2.0f/%2.0f%%, Laplace %2.0f/%2.0f%%"
            % (*within, rms, *g, *l))
