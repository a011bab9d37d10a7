"""Minimal reproduction for a Beam report: the DaskRunner drops what a DoFn emits
from ``finish_bundle``.

    python tests/upstream/beam_dask_finish_bundle.py [SCHEDULER_ADDRESS]

Without an address it starts a two-process ``distributed.LocalCluster``.  A DoFn
emits one element per input from ``process`` and one count per bundle from
``finish_bundle`` (a ``WindowedValue``, as Beam requires there).  Every other
runner delivers both; the DaskRunner (apache-beam 2.77.0) delivers only the
former, silently: ``apply_dofn_to_bundle`` in
``apache_beam/runners/dask/transform_evaluator.py`` takes the bundle's results
before it calls ``invoke_finish_bundle``.  Exit status 1 while the bug is there,
0 once it is fixed.

snm does not depend on it: its DoFns emit everything from ``process``
(pipelines/count_links.py, ``ExtractLinkPartials``), and each stage's manifest checks
that what it wrote adds up to what it read (snm_core/io/losscheck.py).
"""

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue


class CountPerBundle(beam.DoFn):
    def start_bundle(self):
        self.seen = 0

    def process(self, element):
        self.seen += 1
        yield "process"

    def finish_bundle(self):
        yield WindowedValue("finish_bundle", 0, [GlobalWindow()])


def outputs(runner_args):
    """How often each kind of output arrives, as ``{kind: count}``."""
    import collections
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        with beam.Pipeline(options=PipelineOptions(runner_args)) as p:
            _ = (p | beam.Create(range(10)) | beam.ParDo(CountPerBundle())
                 | beam.combiners.Count.PerElement()
                 | beam.Map(lambda kv: f"{kv[0]} {kv[1]}")
                 | beam.io.WriteToText(f"{tmp}/out", num_shards=1, shard_name_template=""))
        with open(f"{tmp}/out") as f:
            return collections.Counter(
                {k: int(n) for k, n in (line.split() for line in f if line.strip())})


def main(address=None):
    cluster = None
    if address is None:
        import distributed
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
        address = cluster.scheduler_address
    try:
        local = outputs(["--runner=FnApiRunner"])
        dask = outputs(["--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                        f"--dask_client_address={address}", "--dask_npartitions=2"])
    finally:
        if cluster is not None:
            cluster.close()
    print(f"FnApiRunner: {dict(local)}\nDaskRunner:  {dict(dask)}")
    lost = local["finish_bundle"] > 0 and dask["finish_bundle"] == 0
    print("finish_bundle outputs dropped by the DaskRunner" if lost else "no outputs lost")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
