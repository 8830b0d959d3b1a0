"""A progress callback that cannot be called is refused before any work starts: it is called
later on the work's own thread, where its failure could only be printed as unraisable."""

import pytest

import einsummable as es


def test_a_progress_that_is_not_callable_is_refused_at_once(tmp_path):
    g = es.workloads.matmul(n=64)
    with pytest.raises(es.EinsummableError, match="progress: 3 is not callable"):
        es.compile(g, devices=2, progress=3)
    with pytest.raises(es.EinsummableError, match="progress: 'lines' is not callable"):
        es.experiment("chains", devices=[2], out=tmp_path, small=True, progress="lines")
    assert list(tmp_path.iterdir()) == []
    lines = []
    es.compile(g, devices=2, progress=lines.append)
    assert lines
