"""Device time of a PyTorch closure on one GPU, by CUDA events: the median of `runs` timed
calls after `warmup` untimed ones, each call between its own pair of events (the same
measure as einsummable's `device_ms`). Shared by torch_llama_block.py and torch_attention.py.

Both scripts report two times: the computation with its output left on the GPU (`ms`), and
the same followed by a copy of the output into pinned host memory (`ms_to_host`), which is
what an einsummable run's device time covers (its Store tasks write the saved outputs to
pinned host memory inside the timed graph)."""
import statistics


def median_device_ms(torch, fn, warmup, runs):
    """Median milliseconds of `fn()` on the current CUDA stream."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def both_times(torch, fn, warmup, runs):
    """`{"ms": ..., "ms_to_host": ...}`: `fn()` alone, and `fn()` with its output copied to a
    pinned host tensor of its shape and dtype."""
    out = fn()
    host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
    on_device = median_device_ms(torch, fn, warmup, runs)
    to_host = median_device_ms(torch, lambda: host.copy_(fn(), non_blocking=True), warmup, runs)
    return {"ms": on_device, "ms_to_host": to_host}
