"""Constants shared across shardlab: units, precisions, optimizers and the seeds' defaults.

Units: memory in bytes unless a name ends in ``_gb``; one GB here is 2**30 bytes, as in the
seed papers' code and in TorchRec's planner. Times are in milliseconds (``_ms``).
"""

from __future__ import annotations

import os

#: Bytes in one "GB" (2**30, the convention of the seeds and TorchRec).
GB = 1024**3

#: Number of reuse-factor bins (docs/methods.md): bin i holds unique rows accessed
#: (2**(i-1), 2**i] times in one batch; bin 0 = exactly once, bin 16 = more than 32768 times.
N_REUSE_BINS = 17

#: Features per table (docs/methods.md): dim, rows, pooling_factor, size, 17 reuse bins.
N_TABLE_FEATURES = 4 + N_REUSE_BINS
FEATURE_NAMES = ("dim", "rows", "pooling_factor", "size") + tuple(
    f"reuse_bin_{i}" for i in range(N_REUSE_BINS)
)

#: Embedding dims must be multiples of this (fbgemm TBE requirement).
DIM_MULTIPLE = 4

#: Input bounds, far beyond any real model, so that sizes stay exact integers and finite floats:
#: rows per table (2**40; public configurations reach 4.2e8), dims per table, GB per device
#: (1 PB), and bytes of a JSON input (1 GiB; a task of 70,000 tables is about 20 MB).
MAX_ROWS = 2**40
MAX_DIM = 65_536
MAX_MEM_CAP_GB = 1e6
MAX_INPUT_BYTES = 2**30

#: Most devices a task, campaign or policy may name (a 16,384-GPU cluster), and the longest
#: forward delay a comm campaign may draw (ms; its rounds wait for it).
MAX_NGPU = 16_384
MAX_DELAY_MS = 60_000.0
#: Most training epochs a command accepts, and most samples a campaign command draws (bounds
#: checked before anything runs; the shipped campaigns have thousands of samples).
MAX_EPOCHS = 1_000_000
MAX_SAMPLES = 1_000_000
#: Largest batch (samples per step) a task or a measurement may have: 256x the 65,536 of the
#: shipped profiles; measuring allocates lookups for a whole batch.
MAX_BATCH_SIZE = 2**24

#: Bytes per stored weight for the supported training precisions.
BYTES_PER_WEIGHT = {"fp32": 4, "fp16": 2}

#: Optimizers TBE trains with on CPU and CUDA (measured on this stack).
OPTIMIZERS = ("exact_sgd", "exact_rowwise_adagrad", "exact_adagrad")

#: Optimizer state in bytes, as (bytes per row, bytes per weight). Row-wise Adagrad keeps one
#: fp32 accumulator per row; full Adagrad one fp32 accumulator per weight; SGD keeps nothing.
OPTIMIZER_STATE_BYTES = {
    "exact_sgd": (0, 0),
    "exact_rowwise_adagrad": (4, 0),
    "exact_adagrad": (0, 4),
}

#: The seeds' global batch size.
DEFAULT_BATCH_SIZE = 65536

#: Dims the seeds draw for tasks and augmentation (NeuroShard augments at each of these).
SEED_DIMS = (4, 8, 16, 32, 64, 128)

#: Tolerance on the sum of reuse bins (JSON files round them).
BIN_SUM_TOLERANCE = 1e-3

#: Marker in the name of a measured column slice (``profile/broad_campaign.column_slice``):
#: ``"<table>[cols 1/<ways>]"``. Split calibration finds the split shards of a dataset by it.
COLUMN_SLICE_MARK = "[cols "

#: Old names of shipped measured datasets that moved, and their names now (paths under
#: ``datasets/``): an old name is refused with the new one. Records made before the move (model
#: provenance: ``dataset:cpu+cpu_broad``) keep the old name; ``measure.store.current_dataset_name``
#: reads them. ``cpu_broad`` moved inside ``datasets/cpu/`` (new measured data ships next to the old).
DATASET_MOVED = {"cpu_broad": "cpu/broad"}

#: The hardware profile plans are made for where none is named (CLI, notebooks, sharders, the
#: model evaluator): ``h100``, the cost models fitted to kernels measured on one H100 with the
#: analytic GPU-cluster comm model (``datasets/h100/NOTES.md``; docs/clusters.md).
PLAN_PROFILE = "h100"
#: The profile measurements on this machine take where none is named (``--measure``, the
#: notebooks' ``measure``, verification): ``cpu``, the one every machine can run.
MEASURE_PROFILE = "cpu"

#: The row-wise comm model's file name in ``datasets/<profile>/models/`` (analytic, fitted to
#: measured row-wise comm: ``studies/row_wise/comm_model.py``).
ROWWISE_COMM_MODEL = "analytic_rowwise_comm"

#: Quantile of a fitted cost model's ratio to its analytic fallback, over its training data near
#: the edge of its valid range, that scales the fallback outside the range
#: (``costmodel/valid_range.py``): 1.0, the largest, an upper envelope, so that a device pushed
#: past the range never looks cheaper than the model found any training shard near the edge.
RANGE_ENVELOPE_QUANTILE = 1.0

#: Quantile of log(measured / predicted) over measured split shards that NeuroShard's split
#: guard charges every device holding a column split (``costmodel/bundle.py``,
#: ``calibrate_splits``): 0.75 asks a split to win even when the model under-predicts its shards
#: as badly as in 1 case of 4.
SPLIT_GUARD_QUANTILE = 0.75

#: Guarded scores within this fraction of the best are tied, and the state with fewest column
#: splits wins: 1% is far below what a paired measurement resolves here (~6%), so a split is
#: never taken for a gain no one could measure.
SPLIT_TIE = 0.01

#: Moves NeuroShard's polish may make per state (``search/polish.py``: a block off the straggler
#: to the device where the plan's predicted cost drops most); 0 turns polishing off. Each move
#: costs one batched model call over (blocks on the straggler) x (G - 1) candidate plans.
POLISH_MAX_MOVES = 200
#: A polish move is made only where it lowers the predicted plan cost by more than this (ms):
#: the grid's own rounding of predicted ms (1e-9), so float noise never counts as a gain.
POLISH_MIN_GAIN_MS = 1e-9
#: Devices a polish move may go to: the straggler's blocks are offered to the devices whose
#: compute + backward comm end first, at most this many (a move to a device that ends late
#: seldom relieves the straggler), so a move costs at most blocks x 64 candidate plans at any G.
POLISH_TARGETS = 64
#: How the column-wise beam costs its candidates by default (``search/column_beam.py``):
#: ``"grid"``, every candidate placed again by the greedy grid, as the seed does. ``"moved"``
#: (from the parent's placement) is 4-7x faster from 400 x 32 up and found cheaper plans there,
#: but worse ones than the seed's search on 11 of 40 small drawn tasks and 2 of 12 larger ones
#: (``studies/search_scaling/costings.py``), so it is an option, not the default.
BEAM_COSTING = "grid"
#: Polish moves each ``"moved"`` candidate gets before the beam ranks it (its kept states get up
#: to ``POLISH_MAX_MOVES``): 2 lets a split's halves pull a block or two off the device they
#: crowd, which ranks candidates by what they are worth once re-balanced.
BEAM_CHILD_MOVES = 2

#: Equivalence margin of a paired comparison (dimensionless, 0.05 = 5%): a plan is
#: ``equivalent`` to the reference when the 95% interval of their paired ratio plan / reference
#: contains 1 and lies inside [1/(1+m), 1+m] (``evaluate/stats.py``; ``--margin`` on the command line).
EQUIVALENCE_MARGIN = 0.05
#: Ranking-aware training of the neural compute models (``rank_weight`` > 0): pairs of a mini-batch
#: whose training targets (log(1 + ms / scale) per output) differ by less than this are not ranked
#: (a 5% gap, the equivalence margin, measured in the target's log units), and the pairwise
#: logistic loss is softplus(-(difference of predictions) / this) for each pair that is.
RANK_LOSS_GAP = 0.0488     # log(1.05)

#: A measured comparison with a time budget (``MeasuredEvaluator(budget_s=...)``) looks at its
#: verdicts after each sitting, at most this many sittings; each look's interval is a repeated
#: confidence interval set by alpha spending on the budget's time scale, so stopping at any look
#: keeps the 5% error rate of one fixed-size comparison (``evaluate/sequential.py``). Sixteen: a
#: cap that a budget of small tasks reaches (their sittings take seconds), far above what larger
#: tasks' budgets hold; decided plans drop out, so the close calls get the sittings the clear ones
#: leave.
SEQUENTIAL_LOOKS = 16

#: Whether a measured evaluation runs each sitting in a fresh process of its own (forked from a
#: clean server: :mod:`shardlab.evaluate.sitting`). On the development VM an op's time depended on
#: what the measuring process had allocated before, so sittings measured in one process were not
#: independent (``studies/set1_development``: one plan's op bimodal, alternating by sitting).
SITTING_FRESH_PROCESS = True
#: ... and the looks before this many sittings spend no error probability unless the budget holds
#: no more (``evaluate/sequential.py``): on set 1 (two runs an hour apart, 2026-12-02) the only two
#: opposite verdicts were both decided after one sitting (x0.85 and x0.91, then x1.10 and x1.11):
#: that sitting's ops ran 20-40% apart from every other sitting's, consistently over its 8 rounds,
#: so its own rounds could not show it.
SEQUENTIAL_MIN_SITTINGS = 2
#: The spending function of those looks (``evaluate/sequential.py`` SPENDING): O'Brien-Fleming's,
#: strict early and nearly a plain 95% interval at the last look.
SEQUENTIAL_SPENDING = "obrien-fleming"
#: Timed runs per op, after untimed warm-up runs, in a comparison measured with a time budget
#: (the profile's own settings where they are smaller). With ops built for every measurement,
#: a median of 3 after 2 halved a plan's round on 4-rank tasks at about the same interval width
#: (``studies/measurement_noise``: 0.85 against 1.7 s per plan per round). Since ops are built
#: once per sitting (``OP_CACHE_GB``) and a round's compute is timed in interleaved sweeps
#: (``measure/interleaved.py``), timed passes are cheap beside the round's comm: on set 1's 4-table
#: task here (4 plans, 20 rounds) 10 after 2 gave a per-round log-sd of the plans' ratios of
#: 0.12-0.19 at 0.97 s per round against 0.28-0.37 at 0.61 s for 3 after 2 -- half the variance
#: per second of measuring.
BUDGET_OP_REPEATS = 10
BUDGET_OP_WARMUP = 2

#: Untimed passes of an op right before each of its timed passes in a round's interleaved sweeps
#: (``measure/interleaved.py``): 0 times each pass after whatever op the sweep ran before it; k > 0
#: times it after k passes of itself, as in training (``studies/set1_development``, op context).
SWEEP_LEAD_PASSES = 0

#: Most bytes of the spacer a sitting's op cache allocates before each op it builds, drawn per op
#: from the sitting's seed (``measure/op_cache.py``), so that each sitting's ops lie at addresses of
#: their own; 0: none.
OP_SPACER_BYTES = 0

#: GB of built fused ops (weights + optimizer state) a measured evaluator keeps from one round to
#: the next within a sitting at most (``measure/op_cache.OpCache``): building an op (allocating
#: and zeroing its weights) took about three quarters of a plan-round on the 12-table set-1 tasks
#: here, and the timed passes a few percent. Ops beyond what is kept are built for each use, timed
#: alone (not in the round's interleaved sweeps) and dropped: on set 1's Ali-CCP tasks of 12-21
#: tables (10.7-11.5 GB of ops a round) a cache of 4 GB left their per-round log-sd of the plans'
#: ratios at 0.22-0.33 against 0.15 over the set.
OP_CACHE_GB = 12.0
#: ... and at most this share of the memory the host has available when a sitting starts
#: (``MemAvailable``; 11 GB on the 24 GB development VM), so that the ops kept never push the
#: machine into swapping or the OOM killer.
OP_CACHE_MEMORY_SHARE = 0.5

#: Paired rounds per sitting of ``compare --measure`` and ``report --measure`` when ``--rounds``
#: is not given (``evaluate --measure`` times one round: a plan's cost, not a comparison).
COMPARE_ROUNDS = 8

#: Timed rounds of the selection sitting that picks the best baseline as the reference when
#: none is named (measured evaluators): the reference is never chosen on the rounds it is judged on.
SELECTION_ROUNDS = 3
#: Paired rounds of a verified search's measurement (``shardlab shard --verify K``, the search
#: notebook's ``verify``) when none are given.
VERIFY_ROUNDS = 5

#: Name of the default shipped table pool.
DEFAULT_POOL = "dlrm-synth"
#: Memory cap per device of a drawn task and of a measured plan campaign's tasks when none is
#: given, GB; and the most memory one compute sample's fused op may take (weights + optimizer
#: state), GB, when none is given (``measure compute --mem-gb``, ``hardware new --mem-gb``).
DEFAULT_MEM_CAP_GB = 4.0
SAMPLE_MEM_GB = 4.0
#: Measurement campaigns' defaults where none is given: the most tables one compute sample
#: fuses; the tables of a plan campaign's tasks (least, most); the largest random forward delay
#: a comm sample draws per rank (ms: the all-to-all waits for the slowest, as after uneven
#: compute); and ``hardware new``'s wall-clock budget (minutes).
SAMPLE_MAX_TABLES = 15
PLAN_CAMPAIGN_TABLES = (10, 60)
COMM_DELAY_MS = 30.0
HARDWARE_NEW_MINUTES = 10.0
#: Samples (or plans) a ``measure`` verb takes when ``--samples`` is not given (0..N-1).
CAMPAIGN_SAMPLES = 100
#: Devices of a drawn task and of a plan campaign's tasks when none are given.
DEFAULT_NGPU = 4

#: GPUs per host assumed where a task says nothing (table-row-wise keeps a table inside one host).
DEFAULT_HOST_SIZE = 8

#: The five heuristic sharders of the seed papers, in the order ``search/heuristics.py`` registers
#: them (docs/methods.md). The one list of them: benchmarks, plan campaigns and tests use it.
HEURISTIC_METHODS = ("random", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")

#: The comparators every learned sharder must beat: the five heuristics and TorchRec's planner.
#: A paired comparison with no reference named compares against the best of these.
BASELINE_METHODS = HEURISTIC_METHODS + ("torchrec",)

#: The plans a model-based search weighs its own against before it answers (``search/portfolio.py``:
#: the cheapest under its model is returned): every comparator it must beat.
PORTFOLIO_METHODS = BASELINE_METHODS

#: The methods a portfolio may name (with options): the baselines, TorchRec's free planner and
#: the exact planner (which then plans on the search's own cost model).
PORTFOLIO_CANDIDATES = BASELINE_METHODS + ("torchrec_free", "optimal")
#: Most tables a portfolio runs TorchRec's planner on (``torchrec``, ``torchrec_free``). Its
#: greedy proposer partitions once per table, each partition over every shard: measured on this
#: 2-core machine (``studies/torchrec_planner``), 2.3 s at 200 tables x 16 GPUs, 6.4 s at 500 x 32,
#: 25-30 s at 1,000 x 16 or 32 -- most of a 1,000 x 64 ShardlabPlanner call. Above it the
#: portfolio skips TorchRec's planner and says so in its record.
PORTFOLIO_TORCHREC_MAX_TABLES = 500

#: Upper bound on ``ngpu`` for any search (``search.registry.run_sharder`` refuses more with a
#: one-line error naming 'ngpu'). Every registered sharder answers at this many devices or
#: refuses at once under its own, lower bound (e.g. ``MAX_NEUROSHARD_GPUS``). ``Task`` itself
#: accepts any ngpu >= 1 (a plan may be read, validated and costed at any size).
MAX_SEARCH_GPUS = 4096

#: Ranks one machine can host for measurement (one process per rank): the comm bench and the
#: evaluators refuse a task with more devices than this rather than oversubscribe the host.
MAX_MEASURE_RANKS = 64

#: Bound on ``ngpu`` for column-wise NeuroShard (its beam search re-runs the 11-cap greedy grid
#: over all devices per candidate split: ~13 s at 256 devices, growing with ngpu, no answer in
#: 120 s at 4096); ``neuroshard`` refuses more at once (neuroshard[columns=false] has no bound of its own).
MAX_NEUROSHARD_GPUS = 256

#: Bound on tables x GPUs for column-wise NeuroShard: its time grows with both (2,000 x 128 =
#: 256,000 took 146 s on the 2-core CPU host, 800 x 64 took 24 s:
#: studies/search_scaling/results/search_scaling-20261127.md), so a larger task is refused at once
#: rather than searched for hours; neuroshard[columns=false] has no such bound.
MAX_NEUROSHARD_WORK = 256_000

#: Longest time budget (s) column-wise NeuroShard takes (``neuroshard[search_budget_s=...]``): with
#: a budget the two bounds above do not apply; the table-wise pass always runs, and each beam
#: round's states are costed in pieces that fit what is left (``search/beam_budget.py``).
MOST_SEARCH_BUDGET_S = 86_400.0

#: The exact planner (``optimal``): up to this many item x device pairs it solves the integer
#: program (with its time limit); up to ``MAX_RELAXED_PAIRS`` it solves the program's LP
#: relaxation for the bound and answers with its greedy start; beyond, the bound is the
#: relaxation averaged over devices (closed form, linear in the tables) -- see
#: ``search/optimal.py``. An item is a whole table or a column half.
MAX_EXACT_PAIRS = 200_000
MAX_RELAXED_PAIRS = 2_000_000
#: The exact planner solves one program per combination of row layouts of the tables that fit
#: no device (``search/row_wise.row_choices``) up to this many combinations, sharing its time
#: limit; beyond, row-wise over every device only.
MAX_LAYOUT_COMBOS = 16

#: Bound on ``ngpu`` for TorchRec's planner: it fails above 128 ranks on one host topology
#: ("Invalid device string: 'cuda:-57'" at 256); ``torchrec``/``torchrec_free`` refuse more at once.
MAX_TORCHREC_GPUS = 128

#: Bounds on tables x GPUs for TorchRec's planner, so that a larger task is refused at once
#: instead of planned for hours (2-core CPU host): ``torchrec`` (table- and column-wise) at the
#: column-wise NeuroShard bound, 256,000; ``torchrec_free`` (row-wise too) at 100 x 64 = 6,400,
#: where TorchRec's full space took 69 s; it gave no plan in 180 s with 500 tables or more, even
#: at 8 ranks (studies/torchrec_planner/results/20261127T125220Z.jsonl).
MAX_TORCHREC_WORK = MAX_NEUROSHARD_WORK
MAX_TORCHREC_FREE_WORK = 6_400

#: Largest mean lookups per sample a table may declare. Published DLRM tables pool at most a few
#: hundred (the shipped pools: <= 209); beyond this a "table" is an input error, not a workload
#: (a pooling of 1e12 once evaluated to 1.3e11 ms through the analytic model's extrapolation).
MAX_POOLING_FACTOR = 1e5

#: ``distribution["model"]`` values a table may carry (where its lookups come from; see
#: shardlab.data.lookups): the generator, a trace, a row block, an older row block (read, no
#: longer written). A table naming any other model is refused when it is read.
GENERATOR_MODEL = "zipf-nb-v1"
TRACE_MODEL = "trace"
ROW_BLOCK_MODEL = "row-block-v2"
ROW_BLOCK_MODEL_V1 = "row-block-v1"
LOOKUP_MODELS = (GENERATOR_MODEL, TRACE_MODEL, ROW_BLOCK_MODEL, ROW_BLOCK_MODEL_V1)

#: TorchRec's planner defaults a drop-in planner keeps (``torchrec/distributed/planner/constants.py``):
#: the per-rank batch (samples) and the pooling factor (lookups per sample) it assumes where the
#: user gives none.
TORCHREC_DEFAULT_BATCH = 512
TORCHREC_DEFAULT_POOLING = 1.0
#: Share of each rank's memory TorchRec's default storage reservation keeps free
#: (``HeuristicalStorageReservation(percentage=0.15)``); ShardlabPlanner keeps the same by default.
TORCHREC_RESERVED_SHARE = 0.15
#: Host-memory offload. TorchRec's compute kernels of a table in HBM, offloaded with an HBM cache,
#: and offloaded without one (``Table.kernel``).
OFFLOAD_KERNELS = ("fused", "fused_uvm_caching", "fused_uvm")
#: TorchRec's sharding types a shardlab plan exports to (``torchrec/export.py``), and the ones
#: the ``torchrec`` baseline may choose (comparable with the seeds); ``torchrec_free`` may choose all.
TORCHREC_SHARDING_TYPES = ("table_wise", "column_wise", "row_wise", "table_row_wise")
TORCHREC_CONSTRAINED_TYPES = ("table_wise", "column_wise")
#: The TorchRec evaluator's defaults (``shardlab.torchrec.TorchRecEvaluator``, ``shardlab evaluate
#: --torchrec``, ``shardlab dist evaluate``): paired rounds, timed and untimed training steps per
#: plan per round.
TORCHREC_ROUNDS = 3
TORCHREC_STEPS = 5
TORCHREC_WARMUP_STEPS = 2
#: Bound on every collective of torchrun-started ranks (``shardlab dist``), s.
DIST_TIMEOUT_S = 900.0
#: Share of an offloaded table's rows its HBM cache holds where neither the constraints
#: (``cache_params.load_factor``) nor the sharder (fused param ``cache_load_factor``) set one:
#: TorchRec's default (``UVM_CACHING_RATIO``, torchrec/distributed/planner/constants.py).
UVM_CACHE_SHARE = 0.2
#: Host-link bandwidth the analytic offload cost divides its traffic by, GB/s (10^9 bytes/s) one
#: way: PCIe Gen5 x16, 32 GT/s x 16 lanes with 128b/130b coding = 63 GB/s (PCI-SIG PCIe 5.0 base
#: specification; NVIDIA's H100 and H200 datasheets: "PCIe Gen5: 128 GB/s", both ways together).
#: TorchRec's own default is 32 GB/s (``HBM_TO_DDR_MEM_BW``, a PCIe Gen4 x16 figure).
UVM_LINK_GBPS = 63.0
#: ShardlabPlanner offloads tables (largest first) until the tables it places need at most this
#: share of all ranks' HBM together, room for the search to pack them.
OFFLOAD_FILL = 0.9
#: Zipf exponent of the lookups assumed where a table's real lookups are unknown (the Criteo
#: workflow's and the drop-in planner's labelled assumption).
ASSUMED_ZIPF = 1.05

#: Task calibration (``costmodel/task_calibration.py``): before a search, the task's own tables are
#: measured on the plan's hardware (each alone, and ``TASK_CALIBRATION_GROUPS`` fused groups of
#: about tables / ngpu tables) and the compute model's fw/bw ms corrected to them. No new op is
#: started after ``TASK_CALIBRATION_BUDGET_S`` seconds of measuring (the target: at most 60 s in all
#: for a 100-table task on the 2-core CPU host, seconds on a GPU). Each op is timed lightly: median of
#: ``TASK_CALIBRATION_REPEATS`` runs after ``TASK_CALIBRATION_WARMUP``, over
#: ``TASK_CALIBRATION_INPUT_BATCHES`` lookup batches. The fitted exponent of the correction
#: (ms = scale x predicted ms ** exponent, per output) is kept within ``TASK_CALIBRATION_EXPONENT``,
#: and the correction is used only where it lowers the held-out (leave-one-out) error by at least
#: ``TASK_CALIBRATION_MIN_GAIN`` (a fraction of the uncorrected error), not for a gain within noise.
TASK_CALIBRATION_BUDGET_S = 45.0
#: Whether NeuroShard calibrates to the task by default (its ``task_calibration`` option left
#: unset) wherever the profile can be measured on the machine at hand; the environment variable
#: ``SHARDLAB_TASK_CALIBRATION=off`` turns the default off (plans that must not depend on a
#: measurement: the test suite's exact-plan checks, a run repeated on another machine).
TASK_CALIBRATION = os.environ.get("SHARDLAB_TASK_CALIBRATION", "on").strip().lower() not in ("off", "0", "false", "no")
TASK_CALIBRATION_GROUPS = 6
TASK_CALIBRATION_WARMUP = 2
TASK_CALIBRATION_REPEATS = 5
TASK_CALIBRATION_INPUT_BATCHES = 2
TASK_CALIBRATION_EXPONENT = (0.5, 1.5)
TASK_CALIBRATION_MIN_GAIN = 0.05
#: An uncorrected error (median relative, the criterion's) below this fraction is not corrected:
#: 0.1%, far below any timing noise, so a gain there is float rounding, not the machine.
TASK_CALIBRATION_MIN_ERROR = 1e-3
