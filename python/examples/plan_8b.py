"""Plans one LLaMA-3-8B block (8192 tokens, bf16) for the 8 GPUs of a DGX H100 and prints
the plan as a table: every operator's split and its costs under the time model, then the
predicted time, the bytes moved and each device's peak memory. Nothing is executed.

    python python/examples/plan_8b.py
"""

import einsummable as es


def main() -> None:
    graph = es.workloads.llama_block(dtype="bf16")
    exe = es.compile(graph, devices=8, topology="dgx-h100")
    plan = exe.plan()
    unit = plan["unit"]
    print(f"{plan['workload']} on {plan['devices']} GPUs of {plan['topology']}: "
          f"{plan['optimizer']} optimizer, {plan['cost_model']} cost ({unit})")
    header = f"{'operator':<14} {'kind':<10} {'split':<26} {'repartition':>11} {'join':>11} {'aggregation':>11} {'compute':>11}"
    print(header)
    print("-" * len(header))
    for op in plan["ops"]:
        split = " ".join(f"{i}={n}" for i, n in op["splits"].items() if n > 1) or "replicated"
        c = op["cost"]
        print(f"{op['name']:<14} {op['kind']:<10} {split:<26} {c['repartition']:>11.3e} {c['join']:>11.3e} "
              f"{c['aggregation']:>11.3e} {c['compute']:>11.3e}")
    print("-" * len(header))
    print(f"total {plan['total_cost']:.4e} {unit}; predicted {plan['predicted_ms']:.3f} ms, "
          f"{plan['bytes_moved'] / 1e9:.3f} GB moved")
    peak = max(plan["memory"]["peak_bytes"]) if "peak_bytes" in plan["memory"] else None
    if peak is not None:
        print(f"peak memory on a device: {peak / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
