"""What bench/vllm_update and bench/sglang_update share: timed updates of
one scenario (vllm_harness.Spec) through loadplan against the engine's own
in-process update of the same weights, in the same run."""

from __future__ import annotations

import statistics


def run(name: str, spec, repeat: int, reference: str) -> tuple[int, float, float]:
    """After two warm-up updates (the first plans, the second makes the
    final endpoints), the median of ``repeat`` updates: the trainer's whole
    ``send_weights`` (start, the transfer, finish), and the slowest worker's
    own update of weights already in memory (no transfer at all); every
    timed update checked byte for byte against the engine's. Prints
    ``NAME: names=N loadplan_s=A REFERENCE_s=B speedup=C``."""
    import vllm_harness as h

    cluster = h.Cluster(spec)
    try:
        for round_ in (1, 2):
            results = cluster.update(round_)
            assert all(s == "ok" for s, _ in results), results
        ours, theirs = [], []
        for round_ in range(3, 3 + repeat):
            results = cluster.update(round_)
            assert all(s == "ok" for s, _ in results), results
            ours.append(max(t for _, t in results))
            theirs.append(max(cluster.workers("time_reference", round_)))
            problems = cluster.workers("compare")
            assert problems == [[]] * spec.tp, problems
        names = len(cluster.workers("plan")[0]["kinds"])
    finally:
        cluster.close()
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"{name}: names={names} loadplan_s={a:.3f} {reference}_s={b:.3f} "
          f"speedup={b / a:.2f}", flush=True)
    return names, a, b
