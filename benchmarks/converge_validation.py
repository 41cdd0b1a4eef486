"""Validate time-to-target (steps until the training loss reaches a target) on real runs.

Protocol (written before any result was looked at; not tuned per case)
-----------------------------------------------------------------------
Runs.
  * ``cpu``: the 45 runs of ``benchmarks/converge_runs.py``, trained on this
    machine: 3 model kinds (student MLP on a random teacher, CNN on noisy
    digits, causal transformer on an order-2 Markov language) x 5 schedules
    (constant, step, warm-up + cosine, WSD with a 20% linear cooldown, inverse
    square root) x 3 seeds. This is the development set: the method's
    constants (prior of the annealing gain, time constant, forms) were set
    while looking at it.
  * ``public``: public logs of real transformer/LLM training with a known
    schedule, committed as small extracts under ``benchmarks/data/public_curves/``
    (each with its repository, path, commit and licence in ``manifest.json``).
    Held out: they are run with the method as committed, never tuned on.
  * ``public-b``: a second set of public logs (``benchmarks/data/public_curves_b/``), gathered on 2026-11-26
    after the first set had been run once and seen (from then on the first set counts as development data).
    Run once, with the method as committed at that moment.

Targets. The curve a user watches is the trailing moving average of the logged
training loss over 5% of the logged points. For a run of N logged points the
targets are that smoothed loss at 60%, 80% and 90% of the run; the true step
of a target is the first logged step at which the smoothed loss is at or below
it.

Forecasts. From the first 10%, 25% and 50% of the logged points, for every
target not yet reached at that point: the method is given the steps and raw
losses logged so far, the schedule (the spec the run was launched with) and
the run's total steps (the horizon: a target not reached by then is "not
reached in the run", an infinite step).

Metrics. Relative error of the median predicted step, |pred - true| / true
(infinite when the forecast says "not reached in the run"); per origin: the
median and the worst over runs x targets, and the share of true steps inside
the 80% band [q10, q90] (goal 70-90%). Forecasts whose status is "not enough
signal" are counted and kept in the errors (their median as given).

Methods compared on the same cases: ``traincast`` (the schedule-aware average
of forms, the default of ``traincast converge``), ``no-schedule`` (the same
without the schedule: forms in the step), ``optimus-auto`` (the previous
default: ``LossCurveModel(form="auto", log_space=True)`` with its bootstrap
band, 80% level).

Goals (issue 20): from 25% of a run, median error <= 10% and worst <= 12%
across schedules; 80% bands covering 70-90% of outcomes.

Third held-out set and the choice of method (written 2026-11-26, before any
result on the third set was seen)
---------------------------------------------------------------------------
  * ``public-c`` (``benchmarks/data/public_curves_c/``): five public LLM
    pre-training logs, none of them in ``public`` or ``public-b`` (three
    build-nanogpt runs with warm-up + cosine to 0.1x, two modded-nanogpt GPT-2
    124M speedrun logs with WSD linear cooldowns of 28.4% and 28.6%; each
    file's repository, path and commit in ``manifest.json``). ``--set all`` is
    the development sets only (cpu, public, public-b); public-c runs only when
    named.
  * From then on ``cpu``, ``public`` and ``public-b`` are all development data.
    The candidates are compared on them only, with the metrics above:
      - ``baseline``: the method as it was at the start (annealing prior
        C/L(now) ~ LogNormal(log 5%, 1); no prior on the exponent);
      - ``anneal-cal``: the annealing prior calibrated on full-curve fits of
        the development LLM runs (median 3.8% of the loss now, log-sd 0.5);
      - ``exp-prior``: a prior on the exponent of the forms in the cumulative
        learning rate (``power``, ``mpl``): log(alpha) ~ N(log 0.4, 0.7);
      - ``anneal-cal+exp-prior``: both.
    Constants are switched with ``--const NAME=VALUE`` (attributes of
    ``traincast.online.curves``: PRIOR_MU, PRIOR_SIGMA, EXP_PRIOR_SIGMA; 0
    turns the exponent prior off).
  * Choice rule: the lowest median error from 25% over the public development
    runs (public + public-b); a candidate whose median from 25% or 50% on the
    ``cpu`` runs is worse than the baseline's by more than 3 points is out;
    ties (within 1 point) go to the band coverage closest to 70-90%.
  * The chosen method becomes the default, and ``--set public-c`` is run once
    with it; its result is reported whatever it shows, and nothing is changed
    after it.

Whole-log extracts, shares of the steps, and a fifth held-out set (written 2026-11-27, before any
result on the dense extracts or on set e was seen)
---------------------------------------------------------------------------------------------------
  * What was wrong. The extracts of ``public-b``, ``public-c`` and ``public-d`` were read from 3-5 blocks of
    each log, so "the first 25% of the logged points" was 3-20% of the steps in most of them, and the targets
    at 60/80/90% of the points fell at 50-99% of the steps. Their figures "from 25%" measured forecasts from
    a few percent of the run. ``public`` (the first set) was extracted over whole logs and is not affected.
  * Fix, protocol: origins and targets are now shares of the run's *steps* (``--by steps``, the default;
    ``--by points`` gives the protocol before): the points seen at origin f are those logged at or before
    step f x T; a target at g is the smoothed loss at the last point logged at or before g x T; a case needs
    a point within 1.5% of the run before f x T (and g x T), else it is skipped and counted as "no logged
    point near". On whole-log extracts this equals the protocol before.
  * Fix, data: ``data/dense/*/`` holds whole-log re-extractions of the logs of public-b, -c and -d (every
    page read, every N-th step; each manifest entry names the block file it replaces), and a fifth held-out
    set e (``set: e``) of public logs in none of the earlier sets. Validation-loss files are left out.
  * Development data: ``cpu``, ``public`` and the dense re-extractions of b, c, d (``--set dense-dev``).
    Candidates (``--const``):
      - ``baseline``: the method as committed on 2026-11-26 (exp-prior);
      - ``cond-median`` (``COND_MEDIAN=1``): when 10-50% of the sampled curves reach the target by the
        horizon, the point forecast is the median step of the curves that reach it (today: "not reached",
        an infinite step), the reach probability given beside it; the band is unchanged.
    Rule (as before): the lower median error from 25% over the public runs of ``dense-dev``; a candidate
    whose median from 25% or 50% on ``cpu`` is worse than the baseline's by more than 3 points is out; ties
    (within 1 point) go to the band coverage closest to 70-90%. The chosen one becomes the default, and
    ``--set public-e`` is run once with it (the baseline printed beside it); the result is reported
    whatever it shows, and nothing is changed after it.

Sixth set f: Hugging Face Trainer fine-tuning logs (written 2026-11-28, before any of these logs was read by
the session that wrote it; the logs were copied by helper sessions under the mechanical rule below)
-----------------------------------------------------------------------------------------------------------
  * Why: sets a-e are LLM pre-training logs of a few code bases (nanoGPT descendants, llm.c, Marian) plus two
    fine-tunes. Most users of ``traincast converge`` fine-tune with the Hugging Face Trainer, whose
    ``trainer_state.json`` logs the training loss and the learning rate; no run of that kind was scored on
    its own.
  * Source: ``trainer_state.json`` at the root of the first 100 repositories the public-code index lists for
    that path (alphabetical, listed 2026-11-28), each read at the commit the index names.
  * Inclusion (mechanical, no look at the curves): the file has at most 150,000 characters; ``global_step``
    >= 200 and >= 0.98 x ``max_steps`` (a finished run); at least 40 log entries with ``loss``,
    ``learning_rate`` and ``step``. Every such entry is copied (``data/public_curves_f/raw/OWNER__NAME.csv``:
    step, loss, learning_rate, epoch; ``.json`` beside it: repository, commit, max_steps, epochs, logging
    steps); skipped repositories and why in ``raw/skipped_*.txt``.
  * Added the same day, when the root files gave 12 runs and before any run was scored: every repository the
    index lists for ``results/trainer_state.json``, ``output/trainer_state.json`` and
    ``outputs/trainer_state.json`` (39), under the same rule. A run whose logged loss is not a training loss
    to be driven down (any value <= 0: reinforcement-learning objectives such as GRPO's) is left out, and so is
    a run whose loss column repeats one already in the set (forks), by the loader; so is a run an earlier set
    already holds (its repository named in an earlier manifest's source: two of set a's runs were found among
    the candidates, TinyLlama QLoRA and Stanford Alpaca).
  * Schedule given to the method: the logged learning rate of the whole run (linear in between), the run's
    total = ``max_steps``: what the user set when launching the job (scheduler type, warm-up, max_steps), not
    an outcome. Targets, origins and metrics as above (``--by steps``).
  * Split: runs sorted by file name; the 1st, 3rd, 5th ... are ``public-f-dev``, the 2nd, 4th ... are
    ``public-f-test``.
  * Order of runs: (1) the method as committed (``baseline``, the default of 2026-11-28) runs once on the whole
    set (``--set public-f``): the held-out figure of today's method on a sixth independent set, reported
    whatever it shows. (2) Any candidate change is compared on ``public-f-dev`` and ``dense-dev`` only, with
    the rule of 2026-11-27 applied to the public runs of both (median error from 25%; out if ``cpu`` from 25%
    or 50% is worse by more than 3 points); (3) the chosen one runs once on ``public-f-test``, reported
    whatever it shows, beside the baseline's figure on the same runs.
  * Candidates (written after step (1) and after one look at ``public-f-dev`` with the exponent prior off,
    which read 23.5% from 25% against the baseline's 28.6% on the same half; before any candidate was run on
    ``dense-dev`` or ``cpu``): ``baseline`` (``EXP_PRIOR_SIGMA`` 0.7), ``exp-wide`` (1.4: the prior on the
    exponent half as strong; fine-tunes that memorise their data fall with exponents of 2-4, which 0.7 about
    log 0.4 all but forbids) and ``exp-off`` (0).
    Result: the baseline stays (docs/online.md).
  * A second candidate, ``epoch-drops`` (written after that result and after looking at the drops of the loss
    across the epoch boundaries of ``public-f-dev``; before it ran on any data): a run that passes over its data
    more than once (steps per pass from the log's ``epoch`` column at the origin) has its loss drop by exp(g) at
    each boundary (``traincast.online.curves.EpochDrops``): g measured at the last boundary seen (the jump of
    the log-loss across it beyond the fall of the 0.1 epoch before), the drops already seen taken out before the
    fit, and each drawn curve dropping at the boundaries to come, g drawn with a log-sd of 0.5 about the measured
    one, or from the prior LogNormal(log 0.1, 1.2) before any boundary is seen. ``--const EPOCH_DROPS=0`` is the
    baseline. The development sets other than ``public-f-dev`` have no epoch column and are unchanged by it, so
    the rule reduces to the pooled median from 25% with ``public-f-dev``'s cases; the winner runs once on
    ``public-f-test``.
    Revised once on ``public-f-dev`` (14.9% pooled from 25%, against the baseline's 19.7%; 12.8% against 9.7% from
    50%), before any run on ``public-f-test``: the prior applies only before the first boundary; boundaries passed
    but logged too coarsely to measure (fewer than two points in a window) leave g at 0, their drops being in
    the fitted trend (runs of 12-50 short epochs drew prior drops at every boundary to come); the windows widen
    to 2.5 logging intervals (at most half an epoch). The revision is the candidate if it is no worse than the
    first version on the rule; else the first version. Result: the revision read 16.6% pooled from 25% (10.6%
    from 50%), worse than the first version's 14.9%: the first version is the candidate, and runs once on
    ``public-f-test``.

Seventh set g, for the next method change (written 2026-11-28, before its logs were gathered)
----------------------------------------------------------------------------------------------
  * Source and rule as set f, from the paths ``model/trainer_state.json`` (51 repositories listed) and
    ``checkpoints/trainer_state.json`` (10); runs an earlier set holds (set f's included) are left out by the
    loader. Copied to ``data/public_curves_g/raw/``; not scored when gathered. All of set f is development data
    from now on; the next candidate is chosen on the development sets and run once on ``public-g``, with the
    method of the day beside it.

  * First candidate scored on set g (written 2026-11-28, after a synthetic check and before it ran on any data):
    a 90-epoch run whose loss has no drops at all, logged every 100 steps with 390 steps a pass, seen to 25%,
    is forecast 45-59% early by ``EpochDrops``: no boundary can be measured at that logging (two points in a
    tenth of an epoch), so every one of the 68 boundaries to come draws the prior's drop. Candidate
    ``epoch-coarse``: once a boundary has been passed, a drop that could not be measured at any of them is 0
    (the passes are in the fitted trend; ``--const EPOCH_COARSE_ZERO=0`` is ``EpochDrops`` as chosen). Rule,
    given that failure on a common kind of run: it replaces ``EpochDrops`` unless its pooled median from 25% on
    the development data (dense-dev + all of set f, now development) is worse by more than 2 points; the
    chosen one then runs once on ``public-g`` beside the method before ``EpochDrops`` (``EPOCH_DROPS=0``).
    Result (pooled, 126 cases from 25%): ``EpochDrops`` 18.2%, ``epoch-coarse`` 21.1%, no epochs 24.4%: worse by
    2.9 points, so ``EpochDrops`` stays (``EPOCH_COARSE_ZERO = 0``) and runs once on ``public-g``.

Eighth set h, for the next method change (written 2026-11-28 at 15:20 UTC, before any of its logs was read)
----------------------------------------------------------------------------------------------------------
  * Why: sets a-g are all seen; the next change needs runs nobody has looked at. The Hugging Face Trainer also
    writes ``trainer_state.json`` into every ``checkpoint-N/`` folder it saves, a source sets f and g did not use.
  * Source: every repository the public-code index lists for ``{results,output,outputs}/checkpoint-{500,1000}/
    trainer_state.json`` or ``checkpoint-{500,1000}/trainer_state.json`` (listed 2026-11-28; 128 repositories,
    ``data/public_curves_h/candidates.tsv`` with the folder holding their checkpoints). For each, the
    ``checkpoint-N`` folder under that parent with the largest N the index lists, its ``trainer_state.json`` read
    at the commit the index names (the last checkpoint holds the whole log).
  * Inclusion: set f's rule (at most 150,000 characters; ``global_step`` >= 200 and >= 0.98 x ``max_steps``; at
    least 40 log entries with ``loss``, ``learning_rate`` and ``step``), set f's files and format
    (``data/public_curves_h/raw/OWNER__NAME.csv`` and ``.json``; skipped ones and why in ``raw/skipped_*.txt``);
    the loader leaves out what it left out of set f (non-positive losses, a loss column another run has, a
    repository an earlier set holds).
  * Use: not scored when gathered except once, with the method as committed (``--set public-h``), as one more
    held-out figure of today's method; the next candidate change is chosen on the development sets (a-g) and
    run once on ``public-h``, beside the method of the day.

The change scored on set h (written 2026-11-28 at 16:35 UTC, after the method of the day was run on dense-dev, public-f
and public-g at 80 draws and its rows looked at; before any candidate below was run on any data)
-----------------------------------------------------------------------------------------------------------------------
  * What the rows show (the method of the day, 80 draws, ``--methods traincast``): pooled over the public development
    runs (dense-dev 62 cases, public-f 64, public-g 25 from 25%) the median error is 23.5% from 25% (band 76%) and
    12.7% from 50% (band 53%). The forecasts are early: from 25% 101 of 151 cases early against 44 late (set g: 22 of
    25 early, median signed error -31.7%). On the Trainer sets the early ones are mostly runs of several passes whose
    drop per pass is the prior's, drawn at *every* boundary to come: before the first boundary (3-epoch runs: the T5
    plateau 26-60% early, three others 10-58%), and in runs of 5-250 short passes logged too coarsely to measure a
    drop at any boundary passed (e.g. 15, 30, 130 and 250 passes: 31-70% early). The drops measurable on the whole
    logs of sets f and g are smaller than the prior's median (1.105x a pass): the per-run median drop over the
    measurable boundaries of the 12 multi-pass runs where any is measurable (EpochDrops' own rule) has quartiles
    0.0100 / 0.0392 / 0.1118 in log-loss. And from 50% the true step lies *below* the band in 29 of 128 cases (13 of
    dense-dev's 57): on the flat end of a curve the watched (noisy) loss dips under a target before the trend does,
    and the forecast reads the crossing of noise-free curves.
  * Candidates (``--const``; each general, no per-run setting):
      - ``baseline``: the method of the day;
      - ``E1 epoch-coarse`` (``EPOCH_COARSE_ZERO=1``, the switch already in ``curves``): once a boundary has been
        passed, a drop no boundary could measure is 0 (the passes are in the fitted trend). Lost on 2026-11-28 on
        dense-dev + set f (21.1% vs 18.2%); scored again because set g is development data now;
      - ``E2 epoch-prior-fg`` (``EPOCH_PRIOR_G=0.0392 EPOCH_PRIOR_SIGMA=1.79``): the prior of the drop a pass set
        from all development Trainer runs (sets f and g) instead of the first boundaries of set f's development
        half: median = the median of the per-run median drops above, log-sd = log(q3/q1)/1.349;
      - ``E3``: E1 and E2 together;
      - ``X1 cross-noise`` (``CROSS_NOISE=1``, new): the step a sampled curve reaches a target is read from the
        curve plus the fluctuation the watched curve shows: log-residuals of the binned curve about the form's fit,
        drawn with replacement (a separate random stream), one per stretch of future steps as long as a bin of the
        curve seen (the median step between bins), added to the draw's log-loss. The floor keeps the noise-free
        curves; the reach probability and the band are of the noisy crossings.
      - ``E* + X1``: the best of E1-E3 by the rule below, with X1.
  * Data and runs: 80 draws, ``--methods traincast``, seed as the script's. E1-E3 change only runs with an epoch
    column (sets f and g): they run on public-f and public-g, their dense-dev and cpu figures are the baseline's
    (checked once: E3 on dense-dev must print the baseline's table). X1 and E* + X1 run on dense-dev, public-f,
    public-g and cpu.
  * Rule: the lowest pooled median error from 25% over the public development runs (dense-dev + public-f +
    public-g, 151 cases); a candidate is out if its pooled median from 50% is worse than the baseline's by more
    than 3 points, or its median from 25% or 50% on ``cpu`` is worse than the baseline's by more than 3 points; ties
    (within 1 point) go to the pooled 80%-band coverage from 25% and 50% closest to 70-90% (sum of the distances
    outside 70-90%). The baseline is a candidate: if none beats it, it stays.
  * Then, once: ``--set public-h --methods traincast --draws 80`` with the winner and with the method of the day
    (if the winner is the baseline, only it); both reported whatever they show (docs/accuracy/), nothing changed
    after. Set h is then seen.
    Result (docs/online.md; docs/accuracy/converge_dev_2026-11-28_seth_candidates.txt): pooled from 25% baseline
    23.5% (band 76%), E1 24.7%, E2 23.1% (88%), E3 25.0%, X1 36.3% and E2 + X1 35.9% (both out: 16.4% and 16.2% from
    50% against 12.7%, cpu 45.3% from 25% against 25.7%). E2 ties the baseline within a point and wins on the bands; it
    is the default. Set h, once: E2 35.9% from 25% (band 59%), 14.4% from 50% (66%); the method before 36.3% (57%),
    14.7% (64%) (docs/accuracy/converge_public_h_2026-11-28_epoch_prior.txt).

Ninth set i, for the next method change (written 2026-11-28 at 21:11 UTC, before any of its logs was read)
------------------------------------------------------------------------------------------------------------
  * Why: sets a-h are all seen (set h since its run of 2026-11-28, evening); the next change needs runs nobody has
    looked at.
  * Source: every repository the public-code index lists for ``P/checkpoint-N/trainer_state.json`` with P one of
    ``results``, ``output``, ``outputs`` or the repository's root and N one of 100, 200, 250, 300, 400, 600, 800,
    1200, 1500, 2000, 2500, 3000, 4000, 5000 (set h took N = 500 and 1000), and for
    ``P/trainer_state.json`` with P one of ``saved_model``, ``model_output``, ``logs``, ``runs``, ``checkpoint``,
    ``trained_model``, ``finetuned_model``, ``fine_tuned_model`` (sets f and g took the root, ``results``,
    ``output(s)``, ``model`` and ``checkpoints``), less the repositories sets f, g and h hold or list
    (``data/public_curves_h/candidates.tsv``). For a checkpoint folder, the ``checkpoint-N`` under that parent with
    the largest N the index lists (the last checkpoint holds the whole log); a repository listed under several
    parents: the parent whose largest checkpoint is largest. Listed in ``data/public_curves_i/candidates.tsv``.
  * Inclusion, files and loader: set h's (at most 150,000 characters; ``global_step`` >= 200 and >= 0.98 x
    ``max_steps``; at least 40 log entries with ``loss``, ``learning_rate`` and ``step``; ``raw/OWNER__NAME.csv``
    and ``.json``; skipped ones and why in ``raw/skipped_*.txt``; the loader leaves out non-positive losses, a loss
    column another run has, and a repository an earlier set holds).
  * Use: not scored when gathered. The next candidate change is chosen on the development sets (a-h) and run once on
    ``public-i`` beside the method of the day; both reported whatever they show.

Tenth set j, for the next method change (written 2026-11-28 at 21:52 UTC, before any of its logs was read)
------------------------------------------------------------------------------------------------------------
  * Why: set i was run once (its result below) and is seen.
  * Source: every repository the public-code index lists for ``P/checkpoint-N/trainer_state.json`` with P one of
    ``results``, ``output``, ``outputs`` or the repository's root and N one of 50, 150, 350, 450, 700, 900, 1600, 1800,
    3500, 6000, 8000, 10000 (sets h and i took 100-5000's round numbers), and for ``P/trainer_state.json`` with P one of
    ``model_checkpoints``, ``training_output``, ``ckpt``, ``save``, ``out``, ``lora_output``, ``finetune_output``,
    ``exp``, less the repositories sets f-i hold or list (``data/public_curves_{h,i}/candidates.tsv`` and their
    ``raw/skipped_*.txt``). The largest checkpoint under a parent, and a repository under several parents, as set i.
    Listed in ``data/public_curves_j/candidates.tsv``.
  * Inclusion, files, loader and use: as set i.
  * Amendment (2026-11-28 at 21:58 UTC, after the first gathering kept 3 runs and before any log of the new paths
    was read; the 3 runs not read by the one who scores): the source also takes ``P/checkpoint-N/trainer_state.json``
    with P one of ``model``, ``models``, ``checkpoints``, ``saved_models``, ``trained_models``, ``runs``, ``logs`` and N
    one of 100, 200, 250, 300, 400, 500, 600, 800, 1000, 1200, 1500, 2000, 2500, 3000, 4000, 5000 (sets f and g took
    the ``trainer_state.json`` at ``model/`` and ``checkpoints/`` themselves, not their checkpoint folders), the
    exclusions and the rest as above.

The change scored on set i (written 2026-11-28 at 21:12 UTC, before the candidates below ran on any data; set i
was not yet gathered)
---------------------------------------------------------------------------------------------------------------
  * What the rows of sets a-h show (the runs of the set-h protocol above, 80 draws): the forecasts from a quarter of
    the run are early far more often than late (pooled development 101 early against 44 late; set h 70 against 17;
    set e's Qwen3-8B and Llama-2-7B continued pre-training 27-50% early): the forms extrapolate the first quarter's
    fall further than the runs go. The rolling-origin backtests on the run itself already measure each form's
    extrapolation error over the part seen (for the weights and the band's width) but take it as zero-mean.
  * Candidates (``--const``; general, no per-run setting): ``baseline``, the method of the day; ``D1``
    (``DRIFT=1``): each form's sampled curves shifted by its own backtest drift (``curves.DRIFT``: the slope of
    its backtest log-error against log(1 + relative horizon), through the origin, median over the origins, applied
    as exp(-slope x log(1 + relative horizon)) beyond the curve seen); ``D05`` (``DRIFT=0.5``): half of it.
  * Data and runs: 80 draws, ``--methods traincast``, the script's seed; dense-dev, public-f, public-g, public-h (a
    development set from now on) and cpu. The baseline's figures are those of the set-h protocol's runs (E2, the
    default since; the code of ``curves`` has changed since only by refactors whose output was checked unchanged);
    the baseline is rerun on public-g as a check that it prints the same table.
  * Rule: the lowest pooled median error from 25% over the public development runs (dense-dev + public-f + public-g
    + public-h); a candidate is out if its pooled median from 50% is worse than the baseline's by more than 3
    points, or its median from 25% or 50% on ``cpu`` is worse than the baseline's by more than 3 points; ties (within
    1 point) go to the pooled 80%-band coverage from 25% and 50% closest to 70-90% (sum of the distances outside
    70-90%). The baseline is a candidate: if none beats it, it stays.
  * Then, once set i is gathered (its own protocol above): ``--set public-i --methods traincast --draws 80`` with
    the winner and with the method of the day (if the winner is the baseline, only it); both reported whatever
    they show (docs/accuracy/), nothing changed after. Set i is then seen.
    Result (docs/online.md; docs/accuracy/converge_dev_2026-11-28_seti_candidates.txt): pooled from 25% baseline
    27.9% (band 77%; 50%: 14.0%), D1 27.5% and D05 26.7%, both out by the cpu runs (from 25% 34.1% and 30.6% against
    25.7%): the baseline stays (``DRIFT = 0``). Set i, once (27 runs): 26.3% from 25% (band 90%), 13.2% from 50%
    (band 72%) (docs/accuracy/converge_public_i_2026-11-28.txt).

The change scored on set j (written 2026-11-28 at 22:00 UTC, after the set-i outcome above and a diagnostic on the
development runs, before any candidate below ran on any evaluation; set j is being gathered, none of its logs read)
---------------------------------------------------------------------------------------------------------------------
  * What the development runs show (sets a-i; diagnostic scripts, not kept): from a quarter the forecasts are early
    (pooled 171 of 243 before set i; set i 47 of 63). The annealing amplitude is not the cause: fitted from a quarter
    it stays at the prior's 5% of the loss on almost every Trainer run, and whole-log fits with it free read a median
    of 4.0% (Trainer runs) and 3.6% (the LLM logs). The exponent is: the forms' exponent prior, log(alpha) ~
    N(log 0.4, 0.7), centres alpha at 0.4, while the ``power`` form fitted to whole logs without it reads a median
    alpha of 1.17 on the 95 Trainer runs, 0.90 on the 21 LLM logs and 0.97 on the 45 CPU runs (``exponent_prior()``):
    a small exponent keeps the loss falling where these runs flatten.
  * Candidates (``--const``; general): ``baseline``; ``P1`` the exponent prior re-derived from whole-log fits of
    every development run (``exponent_prior()``: the log of the median alpha over the 161 runs and log(q3/q1)/1.349:
    ``EXP_PRIOR_MU=0.0759 EXP_PRIOR_SIGMA=1.27``); ``P1m`` its median with today's width (``EXP_PRIOR_MU=0.0759``);
    ``S4`` the fit starting at 40% of the steps seen instead of 20% (``SKIP_FRAC=0.4``: the steep start of a fine-tune
    weighs less in the slope that is extrapolated).
  * Data and runs: 80 draws, ``--methods traincast``, the script's seed; dense-dev, public-f, public-g, public-h,
    public-i (development from now on) and cpu; the baseline's rows are those of the set-i protocol's runs (set i's
    from its run once).
  * Rule: as set i's (the lowest pooled median from 25% over dense-dev + public-f + g + h + i; out if the pooled
    median from 50%, or the cpu median from 25% or 50%, is worse than the baseline's by more than 3 points; ties
    within 1 point to the pooled band coverage closest to 70-90%; the baseline is a candidate).
  * Then, once set j is gathered: ``--set public-j --methods traincast --draws 80`` with the winner and with the method
    of the day (only it if the winner is the baseline); both reported whatever they show; nothing changed after.
    Result (docs/online.md; docs/accuracy/converge_dev_2026-11-28_setj_candidates.txt): pooled from 25% baseline 27.4%
    (band 80%; 50%: 13.9%), P1 27.7%, P1m 28.1% (ties, lose on the bands), S4 25.6% (50%: 11.1%; cpu 22.3% / 7.7%):
    S4 wins and is the default (``SKIP_FRAC = 0.4``). Set j, once (16 runs): S4 26.7% from 25% (band 75%), 14.4% from
    50%; the method before 21.4%, 15.9% (docs/accuracy/converge_public_j_2026-11-28.txt). Set j is then seen.

    PYTHONPATH=src .venv/bin/python benchmarks/converge_validation.py [--set cpu|public|public-b|all|public-c|public-d|dense-dev|public-e|public-f|public-f-dev|public-f-test|public-g|public-h|public-i|public-j] [--by steps|points] [--draws 80] [--const NAME=VALUE]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from traincast.online.converge import LossCurveModel  # noqa: E402
from traincast.errors import DataError  # noqa: E402
from traincast.online.curves import forecast_many  # noqa: E402
from traincast.online.schedule import parse_schedule  # noqa: E402

ORIGINS = (0.1, 0.25, 0.5)
TARGETS = (0.6, 0.8, 0.9)
PUBLIC = HERE / "data" / "public_curves"
PUBLIC_B = HERE / "data" / "public_curves_b"  # a second held-out set, gathered 2026-11-26 (see the docstring)
PUBLIC_C = HERE / "data" / "public_curves_c"  # the third held-out set: run once, at the end, with the chosen method
PUBLIC_D = HERE / "data" / "public_curves_d"  # a fourth held-out set (gathered 2026-11-26), run only by name, for the next method change
DENSE = HERE / "data" / "dense"  # whole-log extracts (2026-11-27): re-extractions of sets b-d, and the fifth held-out set e
PUBLIC_F = HERE / "data" / "public_curves_f"  # the sixth set (2026-11-28): Hugging Face Trainer logs, split dev/test
PUBLIC_G = HERE / "data" / "public_curves_g"  # the seventh (gathered 2026-11-28): held out for the next method change
PUBLIC_H = HERE / "data" / "public_curves_h"  # the eighth (gathered 2026-11-28, checkpoint folders): seen 2026-11-28 (evening)
PUBLIC_I = HERE / "data" / "public_curves_i"  # the ninth (gathered 2026-11-28, night): seen 2026-11-28 (night)
PUBLIC_J = HERE / "data" / "public_curves_j"  # the tenth (gathered 2026-11-28, night): held out for the next change


def smoothed(loss: np.ndarray, w: int) -> np.ndarray:
    """Trailing moving average: what a user watching the curve would call 'the loss'."""
    c = np.cumsum(np.r_[0.0, loss])
    i = np.arange(1, len(loss) + 1)
    a = np.maximum(0, i - w)
    return (c[i] - c[a]) / (i - a)


def cpu_runs():
    from converge_runs import DATA, ensure, read_run

    man_p = DATA / "manifest.json"
    man = json.loads(man_p.read_text()) if man_p.exists() else ensure(quiet=True)
    out = []
    for name, m in sorted(man["curves"].items()):
        k, _, y, _ = read_run(DATA / m["file"])
        out.append(dict(name=name, group=m["model"], schedule=m["schedule"], sched_kind=name.split("_")[1],
                        total=m["total_steps"], steps=k, loss=y))
    return out


def public_runs(folder: Path = PUBLIC):
    man_p = folder / "manifest.json"
    if not man_p.exists():
        return []
    out = []
    for name, m in sorted(json.loads(man_p.read_text()).items()):
        with open(folder / m["file"]) as f:
            rows = [r for r in csv.DictReader(line for line in f if not line.startswith("#"))]
        k = np.array([float(r["step"]) for r in rows])
        y = np.array([float(r[m.get("loss_column", "loss")]) for r in rows])
        out.append(dict(name=name, group=m.get("group", "public"), schedule=m["schedule"], sched_kind=m["schedule_kind"],
                        total=m["total_steps"], steps=k, loss=y))
    return out


NEAR = 0.015  # by steps: an origin or a target needs a logged point within this share of the run before it


def _cut(k: np.ndarray, n: int, f: float, total: int, by: str) -> int | None:
    """Points seen at the share ``f`` of the run: of the logged points (``points``) or of the run's steps (``steps``)."""
    if by == "points":
        return int(f * n)
    c = int(np.searchsorted(k, f * total, side="right"))
    return c if c > 0 and k[c - 1] >= (f - NEAR) * total else None


def dense_runs(sets: tuple[str, ...]):
    """Runs of the whole-log extracts under ``data/dense/*/`` whose manifest entry's ``set`` is in ``sets``.

    Validation-loss extracts (group ``public-llm-val``) are left out: the protocol scores the training loss."""
    out = []
    for man_p in sorted(DENSE.glob("*/manifest.json")):
        man = json.loads(man_p.read_text())
        for run in public_runs(man_p.parent):
            m = man[run["name"]]
            if m.get("set") in sets and run["group"] != "public-llm-val":
                out.append(run | {"set": m["set"]})
    return out


def hf_runs(part: str = "all", folder: Path = PUBLIC_F):
    """Runs of set f (``raw/*.csv`` with ``.json`` beside): the whole logged learning rate as the schedule.
    ``part``: ``all``, ``dev`` (1st, 3rd, ... by file name) or ``test`` (2nd, 4th, ...)."""
    from traincast.online.schedule import Schedule

    files = sorted((folder / "raw").glob("*.csv"))
    earlier = " ".join(str(m.get("source", "")) for man_p in [*HERE.glob("data/public_curves*/manifest.json"),
                                                              *DENSE.glob("*/manifest.json")]
                       for m in json.loads(man_p.read_text()).values())
    trainer_sets = [PUBLIC_F, PUBLIC_G, PUBLIC_H, PUBLIC_I, PUBLIC_J]
    for prev in trainer_sets[:trainer_sets.index(folder)] if folder in trainer_sets else []:
        # a later Trainer set: the earlier Trainer sets' runs are earlier too
        earlier += " " + " ".join(json.loads(q.read_text())["repo"] + " " for q in (prev / "raw").glob("*.json"))
    out, seen = [], []
    for i, p in enumerate(files):
        if part == "dev" and i % 2 or part == "test" and not i % 2:
            continue
        meta = json.loads(p.with_suffix(".json").read_text())
        if f"{meta['repo']} " in earlier:
            continue  # scored in an earlier set (the docstring)
        with open(p) as f:
            rows = list(csv.DictReader(f))
        k = np.array([float(r["step"]) for r in rows])
        y = np.array([float(r["loss"]) for r in rows])
        lr = np.array([float(r["learning_rate"]) for r in rows])
        ep = np.array([float(r["epoch"]) if r.get("epoch") not in (None, "") else math.nan for r in rows])
        o = np.argsort(k, kind="stable")
        k, y, lr, ep = k[o], y[o], lr[o], ep[o]
        if np.any(y <= 0) or any(np.array_equal(y, r["loss"]) for r in seen):
            continue  # not a loss to drive down (RL objectives), or a fork's copy (the docstring)
        total = int(meta["max_steps"])
        ks, vs = k.copy(), lr / max(float(np.max(lr)), 1e-300)
        sched = Schedule("logged (whole run)", lambda x, ks=ks, vs=vs: np.interp(x, ks, vs), total)
        v = vs[k >= k[int(np.argmax(vs))]]
        kind = ("constant" if np.ptp(vs) < 0.03 else "decaying" if v[-1] < 0.5 else "other")
        seen.append(dict(loss=y))
        group = ("hf-" + ("test" if i % 2 else "dev")) if folder == PUBLIC_F else "hf-" + folder.name.rsplit("_", 1)[-1]
        out.append(dict(name=p.stem, group=group, schedule=sched, sched_kind=kind,
                        total=total, steps=k, loss=y, epoch=ep))
    return out


def _steps_per_epoch(run, k_now: float) -> float | None:
    """Steps per pass over the data as the log tells it at step ``k_now`` (its last logged epoch share), when the
    run makes more than one pass; None for runs without an epoch column, or ``--const EPOCH_DROPS=0``."""
    import traincast.online.curves as _c

    ep = run.get("epoch")
    if ep is None or not _c.EPOCH_DROPS:
        return None
    k = run["steps"]
    m = (k <= k_now) & np.isfinite(ep) & (ep > 0)
    if not m.any():
        return None
    spe = float(k[m][-1] / ep[m][-1])
    return None if _c.one_pass(spe, run["total"]) else spe


def boundary_drops(run) -> list[float]:
    """The drop of the log-loss at each boundary of the whole log that ``EpochDrops.measure``'s rule can measure (two
    points in each window), beyond the fall of the window before; [] for one-pass runs or runs without epochs."""
    from traincast.online.curves import boundary_drops as drops

    k, y = run["steps"], run["loss"]
    spe = _steps_per_epoch(run, float(k[-1]))
    return [] if spe is None else drops(k, y, spe)


def epoch_drop_prior() -> tuple[float, float]:
    """The prior of the drop a pass (``EPOCH_PRIOR_G``, ``EPOCH_PRIOR_SIGMA``) from the development Trainer runs (sets f
    and g; protocol of 2026-11-28 16:35, candidate E2): the median over runs of each run's median measurable drop,
    and log(q3/q1)/1.349 of those per-run drops."""
    per = [float(np.median(g)) for run in hf_runs("all") + hf_runs("all", PUBLIC_G) if (g := boundary_drops(run))]
    q1, med, q3 = np.percentile(per, [25, 50, 75])
    return float(med), float(math.log(q3 / q1) / 1.349)


def exponent_prior() -> tuple[float, float, dict]:
    """The exponent prior (``EXP_PRIOR_MU``, ``EXP_PRIOR_SIGMA``) from whole-log fits of the development runs (protocol
    of set j, candidate P1): the ``power`` form fitted to each run's whole log with its schedule (and its passes) and no
    exponent prior, as ``curves.sample_curves`` fits it; the log of the median exponent over the runs and
    log(q3/q1)/1.349 of them. Also the medians by kind of run."""
    import traincast.online.curves as _c
    from traincast.online.curves import sample_curves

    kinds = {"cpu": cpu_runs(), "dense-dev": public_runs() + dense_runs(("b", "c", "d")),
             "trainer": [r for folder in (PUBLIC_F, PUBLIC_G, PUBLIC_H, PUBLIC_I) for r in hf_runs("all", folder)]}
    old, _c.EXP_PRIOR_SIGMA = _c.EXP_PRIOR_SIGMA, 0.0
    alphas: dict[str, list[float]] = {}
    try:
        for kind, runs in kinds.items():
            for run in runs:
                k, y = run["steps"], run["loss"]
                ok = np.isfinite(y) & (y > 0) & (k > 0)
                sched = (run["schedule"] if not isinstance(run["schedule"], str)
                         else parse_schedule(run["schedule"], run["total"]))
                try:
                    dr = sample_curves(k[ok], y[ok], sched, run["total"], n_draws=1, forms=["power"],
                                       run_steps=run["total"], steps_per_epoch=_steps_per_epoch(run, float(k[ok][-1])))
                except DataError:
                    continue
                if "power" in dr.fits:
                    alphas.setdefault(kind, []).append(float(dr.fits["power"].params[2]))
    finally:
        _c.EXP_PRIOR_SIGMA = old
    every = [a for v in alphas.values() for a in v]
    q1, med, q3 = np.percentile(every, [25, 50, 75])
    return float(math.log(med)), float(math.log(q3 / q1) / 1.349), {k: (len(v), float(np.median(v))) for k, v in alphas.items()}


def evaluate(run, draws: int, methods=("traincast", "no-schedule", "optimus-auto"), by: str = "steps"):
    k, y = run["steps"], run["loss"]
    ok = np.isfinite(y) & (y > 0) & (k > 0)
    k, y = k[ok], y[ok]
    n = len(k)
    sm = smoothed(y, max(n // 20, 5))
    sched = run["schedule"] if not isinstance(run["schedule"], str) else parse_schedule(run["schedule"], run["total"])
    rows = []
    for f in ORIGINS:
        cut = _cut(k, n, f, run["total"], by)
        if cut is None:
            rows.append(dict(run=run["name"], group=run["group"], sched=run["sched_kind"], origin=f, target_at=None,
                             method="-", skipped=True, why="no logged point near the origin"))
            continue
        k_cut = k[cut - 1]
        cases = []
        for tf in TARGETS:
            if tf <= f:
                continue
            it = _cut(k, n, tf, run["total"], by)
            if it is None:
                rows.append(dict(run=run["name"], group=run["group"], sched=run["sched_kind"], origin=f, target_at=tf,
                                 method="-", skipped=True, why="no logged point near the target"))
                continue
            target = float(sm[it - 1])
            true_step = float(k[int(np.argmax(sm <= target))])
            if true_step <= k_cut:
                rows.append(dict(run=run["name"], group=run["group"], sched=run["sched_kind"], origin=f, target_at=tf,
                                 method="-", skipped=True, why="target already reached at the origin"))
                continue
            cases.append((tf, target, true_step))
        if not cases:
            continue
        for meth in methods:
            t0 = time.time()
            if meth == "optimus-auto":
                preds = []
                try:
                    m = LossCurveModel("auto", log_space=True).fit(k[:cut], y[:cut])
                except (DataError, ValueError):  # too few points to fit
                    m = None
                for _, target, _ in cases:
                    if m is None:
                        preds.append((math.inf, math.nan, math.nan, "not enough signal"))
                        continue
                    s = m.steps_to_target(target, n_boot=40, level=0.8)
                    st = s.steps if s.steps <= run["total"] else math.inf
                    preds.append((st, s.low, s.high if s.high <= run["total"] else math.inf, "ok"))
            else:
                spe = _steps_per_epoch(run, k[cut - 1]) if meth == "traincast" else None
                try:
                    fcs = forecast_many(k[:cut], y[:cut], [c[1] for c in cases],
                                        sched if meth == "traincast" else None, run["total"], n_draws=draws, seed=0,
                                        steps_per_epoch=spe)
                    preds = [(fc.steps, fc.low, fc.high, fc.status) for fc in fcs]
                except DataError:  # too few points to fit (a short log at 10%): the method declines, no step given
                    preds = [(math.inf, math.nan, math.nan, "not enough signal")] * len(cases)
            dt = time.time() - t0
            for (tf, target, true_step), (st, lo, hi, status) in zip(cases, preds):
                err = abs(st - true_step) / true_step if math.isfinite(st) else math.inf
                rows.append(dict(run=run["name"], group=run["group"], sched=run["sched_kind"], origin=f, target_at=tf,
                                 method=meth, true=true_step, pred=st, low=lo, high=hi, status=status, err=err,
                                 covered=bool(lo <= true_step <= hi), seconds=dt / len(cases), skipped=False))
    return rows


def _fmt(e):
    return "inf" if not math.isfinite(e) else f"{e:.1f}%"


def table(rows, title, by="method"):
    print(f"\n{title}")
    print(f"{by:14} {'from':>5} {'n':>4} {'median':>8} {'IQR':>17} {'worst':>8} {'80% band covers':>16} {'not enough signal':>18}")
    keys = sorted({r[by] for r in rows if not r["skipped"]})
    for key in keys:
        for f in ORIGINS:
            sel = [r for r in rows if not r["skipped"] and r[by] == key and r["origin"] == f]
            if not sel:
                continue
            e = np.array([r["err"] for r in sel]) * 100
            q1, q3 = np.percentile(np.where(np.isfinite(e), e, 1e9), [25, 75])  # inf sorts last, prints as inf
            q1, q3 = (float("inf") if q >= 1e6 else float(q) for q in (q1, q3))  # (or between a finite and inf)
            cov = np.mean([r["covered"] for r in sel]) * 100
            nes = sum(r["status"] == "not enough signal" for r in sel)
            print(f"{key:14} {f:>5.0%} {len(sel):>4} {_fmt(float(np.median(e))):>8} {_fmt(q1):>8}-{_fmt(q3):>8} "
                  f"{_fmt(float(np.max(e))):>8} {cov:>15.0f}% {nes:>18}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", choices=("cpu", "public", "public-b", "all", "public-c", "public-d", "dense-dev", "public-e",
                                   "public-f", "public-f-dev", "public-f-test", "public-g", "public-h", "public-i", "public-j"),
                    default="all",
                    help="all = the first development sets (cpu, public, public-b); dense-dev = public (whole-log extracts "
                         "already) + the whole-log re-extractions of public-b/c/d; public-c, public-d and public-e are "
                         "held-out sets, run only by name; public-f: Hugging Face Trainer logs (halves public-f-dev, "
                         "public-f-test; see the docstring); public-g, public-h, public-i, public-j: later held-out Trainer sets")
    ap.add_argument("--by", choices=("steps", "points"), default="steps",
                    help="origins and targets as shares of the run's steps (default, 2026-11-27) or of the logged points "
                         "(the protocol before: the same on whole-log extracts, not on block extracts)")
    ap.add_argument("--draws", type=int, default=80, help="sampled curves per forecast")
    ap.add_argument("--only", default=None, help="runs whose name contains this")
    ap.add_argument("--methods", default="traincast,no-schedule,optimus-auto")
    ap.add_argument("--save", default=None, help="write the rows as JSON here")
    ap.add_argument("--const", action="append", default=[],
                    help="NAME=VALUE: set a constant of traincast.online.curves (candidate methods; see the docstring)")
    args = ap.parse_args()
    import traincast.online.curves as _curves

    for kv in args.const:
        name, _, val = kv.partition("=")
        if not (name.isupper() and isinstance(getattr(_curves, name, None), (int, float))):
            ap.error(f"--const: traincast.online.curves has no numeric constant {name!r}")
        try:
            setattr(_curves, name, float(val))
        except ValueError:
            ap.error(f"--const {kv}: the value is not a number")
        print(f"constant {name} = {float(val)!r}")
    t0 = time.time()
    runs = ((cpu_runs() if args.set in ("cpu", "all") else []) + (public_runs() if args.set in ("public", "all") else [])
            + (public_runs(PUBLIC_B) if args.set in ("public-b", "all") else [])
            + (public_runs(PUBLIC_C) if args.set == "public-c" else [])
            + (public_runs(PUBLIC_D) if args.set == "public-d" else [])
            + (public_runs() + dense_runs(("b", "c", "d")) if args.set == "dense-dev" else [])
            + (dense_runs(("e",)) if args.set == "public-e" else [])
            + (hf_runs({"public-f": "all", "public-f-dev": "dev", "public-f-test": "test"}[args.set])
               if args.set.startswith("public-f") else [])
            + (hf_runs("all", PUBLIC_G) if args.set == "public-g" else [])
            + (hf_runs("all", PUBLIC_H) if args.set == "public-h" else [])
            + (hf_runs("all", PUBLIC_I) if args.set == "public-i" else [])
            + (hf_runs("all", PUBLIC_J) if args.set == "public-j" else []))
    if args.only:
        runs = [r for r in runs if args.only in r["name"]]
    methods = tuple(args.methods.split(","))
    rows = []
    try:
        from rich.progress import track as _track
    except ImportError:  # pragma: no cover
        def _track(x, **_):
            return x
    for run in _track(runs, description="forecasting", disable=not sys.stderr.isatty()):
        rows += evaluate(run, args.draws, methods, by=args.by)
    whys = {}
    for r in rows:
        if r["skipped"]:
            whys[r["why"]] = whys.get(r["why"], 0) + 1
    print(f"{len(runs)} runs; origins and targets by share of the {args.by}; skipped (run, origin, target) cases: "
          + (", ".join(f"{v} {k}" for k, v in sorted(whys.items())) or "none"))
    for group in sorted({r["group"] for r in rows}):
        table([r for r in rows if r["group"] == group], f"== {group}: steps-to-target error by method")
    table(rows, "== all runs: steps-to-target error by method")
    tr = [r for r in rows if r["method"] == "traincast" or r["skipped"]]
    table(tr, "== traincast, by schedule", by="sched")
    if args.save:
        Path(args.save).write_text(json.dumps(rows, default=float, indent=0))
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
