"""The Timer core: costs scale with work, and the loop's own cost is removed."""

import statistics
import time

import pytest
import torch

from overrides.clock import stats, timer
from overrides.clock.timer import (CALIBRATION_BURSTS, CALIBRATION_GAP_S, TARGET_SAMPLE_NS, UNROLL,
                                   Target, TimerConfig, calibrate_calls, compile_loop, time_targets)


def _operands():
    return torch.tensor([1.0]), torch.tensor([2.0])


def test_twice_the_work_costs_about_twice_as_much():
    once = Target("once", "torch.add(x, y)", _operands)
    twice = Target("twice", "torch.add(x, y); torch.add(x, y)", _operands)
    run = time_targets([once, twice], TimerConfig(min_time_s=1.0))
    one, two = (stats.headline(t.samples_ns) for t in run.targets)
    # Round-robin puts machine drift on both alike, but slow spells do not slow every call
    # by the same factor; 2x +-25% held in every run on this noisy 2-core VM.
    assert 1.5 < two / one < 2.5, (one, two)


ATTEMPTS = 5  # ~3 s each quiet


@pytest.mark.slow
def test_loop_cost_removal_makes_the_figure_independent_of_calls_per_sample():
    # The loop turn and the two clock reads cost ~2.5 ns a call at 50 calls a sample here (~39 ns
    # where the clock is slower) and a seventh of that at 500. Removed properly, the per-call
    # figure of a nearly free statement agrees across both; not removed, the two differ by all of
    # the difference in loop cost. Here the two figures differed by at most 15% of it, quiet or
    # with a CPU hog on each core.
    # Why this holds on a busy machine: both sizes are timed in alternating short runs, so a slow
    # spell lands on both alike, and compared by the headline, the undisturbed floor. The first
    # version compared medians of two runs taken one after the other against a fixed 2 ns: the
    # medians moved with the load (up to a third of the loop cost, 1.3 ns here) and the statement
    # itself runs up to 65% slower in a slow spell, so it failed beside a CPU-heavy process.
    # Up to ATTEMPTS attempts, each measured afresh: a slow spell on a shared machine (a busy
    # loop, the other xdist worker and another tenant: residual 65% once; five CPU-bound
    # processes on 2 cores: 70% on each of three) passes on a later attempt, while a loop cost
    # not removed leaves all of it on every attempt.
    for attempt in range(ATTEMPTS):
        samples = {50: [], 500: []}
        removed = {50: [], 500: []}
        for _ in range(6):
            for calls in samples:
                timed = time_targets([Target("x", "x", _operands)],
                                     TimerConfig(calls_per_sample=calls, samples=500)).targets[0]
                samples[calls] += timed.samples_ns
                removed[calls].append(timed.loop_overhead_ns)
        short_loop, long_loop = (statistics.median(removed[calls]) for calls in (50, 500))
        # The removal had work to do: the loop costs several times more a call at 50 than at
        # 500. Measured afresh on each attempt too: with five CPU-bound processes on 2 cores
        # the empty loop's own floor at 500 calls was once lifted past a third of the other.
        work_to_do = short_loop > 3 * long_loop
        # The fastest samples: under a CPU hog on each core beside the suite (four CPU-heavy
        # processes on 2 cores) even the headline's 2nd percentile carried the load, and the
        # residual read 88% of the difference on all five attempts; the floor did not move.
        residual = min(samples[50]) - min(samples[500])
        # Half the difference: not removed, the residual is all of it. Beside a busy loop *and*
        # the suite's other xdist worker (three CPU-heavy processes on 2 cores) it reached 37%.
        if work_to_do and abs(residual) < (short_loop - long_loop) / 2:
            return
    pytest.fail(f"residual {residual:.2f} ns of a {short_loop - long_loop:.2f} ns loop-cost difference "
                f"(loop {short_loop:.2f} ns a call at 50, {long_loop:.2f} at 500) on {ATTEMPTS} attempts: "
                "the loop cost is not removed")


def test_an_empty_statement_costs_nothing_after_removal():
    # 50 calls a sample, where the loop costs ~2.5 ns a call here: not removed, the figure would
    # be all of it. Compared by the headline, as the loop cost removed is the empty samples' own
    # headline quantile; their median sits above it by however busy the machine was.
    timed = time_targets([Target("empty", "", _operands)],
                         TimerConfig(calls_per_sample=50, samples=2000)).targets[0]
    assert timed.loop_overhead_ns > 0
    # Not removed, it would read all of the loop cost. Within 3% of it here when quiet; the two
    # identical loops' headlines differed by 27% of it once in CI's Python 3.12 run (0.6 of 2.2 ns,
    # 30 ns a sample on a clock that read in steps of 10 ns), so half is the line.
    assert abs(stats.headline(timed.samples_ns)) < timed.loop_overhead_ns / 2, timed.loop_overhead_ns


def test_every_sample_is_kept_and_calls_are_exact():
    run = time_targets([Target("t", "torch.add(x, y)", _operands)],
                       TimerConfig(calls_per_sample=137, samples=25))
    timed = run.targets[0]
    assert timed.calls_per_sample == 137 and len(timed.samples_ns) == 25 and run.rounds == 25


def test_compiled_loop_runs_the_statement_exactly_calls_times_plus_the_warm_calls():
    counter = []
    loop = compile_loop("x.append(1)", calls=123, unroll=50, warm_calls=7)
    loop((counter, None))
    assert len(counter) == 123 + 7


CALIBRATION_ATTEMPTS = 5


def test_calibration_sizes_samples_to_about_a_millisecond():
    # The fastest of 20 samples taken right after calibration: 0.96-1.02 ms here in 60 runs, quiet
    # or with a CPU hog on each core (0.87-1.09 ms with the previous calibration). A slow spell over
    # these 20 ms reads at most 1.65x. One had to cover calibration's bursts (~60 ms) to fool it;
    # 30 probes back to back (the first version) were fooled by one of ~3 ms into 0.39 ms samples.
    # Such spells do cover them on a shared machine: beside one CPU-bound process (load ~14 on 2
    # cores, other tenants' work) 100 calibrations in a row sized 500-900 calls (0.63-1.53 ms), and
    # the run read (300, 471850): calibration saw torch.add 2.1x slower than the samples
    # right after it. A run corrects that itself (test_a_calibration_fooled_by_a_longer_slow_spell_
    # is_redone_from_the_samples); here each attempt calibrates afresh, so a spell passes on a later
    # attempt while a calibration that sizes wrongly is out of bounds on every one.
    probe = compile_loop("torch.add(x, y)", UNROLL)
    operands = _operands()
    for _ in range(200):
        probe(operands)
    attempts = []
    for _ in range(CALIBRATION_ATTEMPTS):
        calls = calibrate_calls(probe, operands)
        assert calls % UNROLL == 0
        elapsed = min(compile_loop("torch.add(x, y)", calls)(operands) for _ in range(20))
        attempts.append((calls, elapsed))
        if TARGET_SAMPLE_NS / 2 < elapsed < TARGET_SAMPLE_NS * 2:
            return
    pytest.fail(f"(calls, fastest sample ns) on {CALIBRATION_ATTEMPTS} attempts: {attempts}")


def _probe_with_a_slow_spell(per_call_ns: float, spell_s: float, slowdown: float = 2.5):
    """A stand-in for a warm probe (UNROLL calls at `per_call_ns`) that reads `slowdown` times
    slower for the first `spell_s` seconds, as in a slow spell of the machine."""
    spell_ends = time.perf_counter() + spell_s

    def probe(_operands):
        slowed = time.perf_counter() < spell_ends
        return round(UNROLL * per_call_ns * (slowdown if slowed else 1))

    return probe


def test_calibration_is_not_fooled_by_a_slow_spell_shorter_than_its_bursts():
    # 2.5x slow for the first 30 ms: sized at 400 calls a sample instead of ~1000 when
    # calibration took 30 probes back to back. Its bursts, spread over ~60 ms, reach past it.
    spell_s = 0.03
    assert spell_s < (CALIBRATION_BURSTS - 1) * CALIBRATION_GAP_S
    calls = calibrate_calls(_probe_with_a_slow_spell(1000.0, spell_s), _operands())
    # 1000 calls at 1 us, or a few more: the real empty probe's cost (0.1-2 us) is removed.
    assert 1000 <= calls <= 1100, calls


def _slowed_calibration(monkeypatch, factor: float) -> list:
    """Make every calibration read `factor` times the real per-call cost; returns the list the
    calibrated costs are appended to."""
    real = timer.probe_per_call_ns
    measured = []

    def slowed(probe, operands, mode="cpu"):
        measured.append(factor * real(probe, operands, mode))
        return measured[-1]

    monkeypatch.setattr(timer, "probe_per_call_ns", slowed)
    return measured


def test_a_calibration_fooled_by_a_longer_slow_spell_is_redone_from_the_samples(monkeypatch):
    # A spell can outlast calibration's bursts: here calibration reads 4x slow. The samples then
    # run faster than calibration measured, which noise cannot make them do: the target is
    # resized from its fastest sample and the rounds start over, so all samples kept share it.
    # (At 2.5x, a fresh-clone run whose samples all ran ~1.7x slow beside another tenant had its
    # fastest sample above RECALIBRATE_BELOW of the fooled figure: nothing to correct, and failed.)
    calibrated = _slowed_calibration(monkeypatch, 4.0)
    said = []
    run = time_targets([Target("t", "torch.add(x, y)", _operands)], TimerConfig(samples=100),
                       progress=said.append)
    (timed,) = run.targets
    fooled_calls = timer.calls_for(calibrated[0])
    # ~4x the fooled size; 1.5x still holds if the first rounds ran 2.6x slow (a slow spell).
    assert timed.calls_per_sample >= 1.5 * fooled_calls, (timed.calls_per_sample, fooled_calls)
    assert run.rounds == len(timed.samples_ns) == 100
    assert any(line.startswith("recalibrating t:") for line in said), said
    # The run says so, not only its progress (which -q silences): a note under the table.
    assert run.recalibrated == ("t",)


def test_a_run_that_calibrated_during_a_slow_spell_says_so_under_its_table(monkeypatch):
    from overrides import run_report
    from overrides.cases.ops import resolve_ops
    from overrides.cases.registry import resolve_cases
    from overrides.single_run import run_benchmark

    _slowed_calibration(monkeypatch, 4.0)
    run = run_benchmark(resolve_cases(["Tensor"]), resolve_ops(None), TimerConfig(samples=100))
    assert run.settings.recalibrated == ("Tensor [torch.add]",)
    assert "calibrated during a slow spell: Tensor [torch.add] ran well faster" in run_report.table(run)


def test_samples_slower_than_calibration_are_left_alone(monkeypatch):
    # Calibration reads half the real cost, so every sample runs slower than it predicted: that
    # is what the run's own slow spells look like, and no reason to resize or start over.
    calibrated = _slowed_calibration(monkeypatch, 0.5)
    said = []
    run = time_targets([Target("t", "torch.add(x, y)", _operands)], TimerConfig(samples=100),
                       progress=said.append)
    (timed,) = run.targets
    assert timed.calls_per_sample == timer.calls_for(calibrated[0])
    assert run.rounds == len(timed.samples_ns) == 100
    assert not any("recalibrating" in line for line in said), said
    assert run.recalibrated == ()


def test_a_failing_target_does_not_sink_the_others():
    bad = Target("bad", "torch.add(x, 'not a tensor')", _operands)
    good = Target("good", "torch.add(x, y)", _operands)
    run = time_targets([bad, good], TimerConfig(calls_per_sample=50, samples=20))
    failed, fine = run.targets
    assert failed.error and "TypeError" in failed.error and not failed.samples_ns
    assert fine.error is None and len(fine.samples_ns) == 20


def test_threads_and_gc_are_restored():
    import gc

    before = torch.get_num_threads()
    time_targets([Target("t", "torch.add(x, y)", _operands)],
                 TimerConfig(calls_per_sample=50, samples=20, threads=1))
    assert torch.get_num_threads() == before and gc.isenabled()


def test_the_stopping_rule_stops_when_precise_and_at_the_cap_otherwise():
    target = Target("t", "torch.add(x, y)", _operands)
    # A precision any run reaches: sampling stops at the floor (checked every 0.2 s after it).
    loose = time_targets([target], TimerConfig(min_time_s=0.3, precision=0.5, max_time_s=5.0))
    assert loose.stopped == "precision" and loose.wall_s < 3.0, (loose.stopped, loose.wall_s)
    # A precision no run reaches: sampling goes on to the cap, and says so (the drift stop off: on
    # a busy machine the figure moves, and the run stops there, test_a_run_whose_figures_moved_...).
    strict = time_targets([target], TimerConfig(min_time_s=0.3, precision=1e-9, max_time_s=0.8,
                                                drift_max_width=None))
    # It sampled for the whole cap (by the clock, not by how many samples fit: beside five
    # CPU-bound processes on 2 cores it took fewer samples in 0.8 s than the loose run in 0.3).
    assert strict.stopped == "time cap" and strict.wall_s >= 0.8, (strict.stopped, strict.wall_s)
    # Without a precision, min_time_s is the time to sample for; with fixed samples, that count.
    assert time_targets([target], TimerConfig(min_time_s=0.2)).stopped == "time"
    assert time_targets([target], TimerConfig(calls_per_sample=50, samples=20)).stopped == "samples given"


def _stepping_work(step_after_s: float, iterations: int = 200, factor: int = 2):
    """A function whose cost steps up `factor` times, for good, `step_after_s` after its first
    call: a machine that turned slower halfway through a run, by construction."""
    first_call = []

    def work():
        now = time.perf_counter()
        if not first_call:
            first_call.append(now)
        for _ in range(iterations if now - first_call[0] < step_after_s else iterations * factor):
            pass

    return work


def test_a_run_whose_figures_moved_stops_before_the_cap():
    # The host: no case reached +-0.2% and every run sampled to the cap. Here the cost
    # doubles ~0.3 s into the rounds (warm-up and calibration take ~0.15 s first), so once the
    # second half of the rounds lies past the step (~0.6 s of rounds) the halves' headlines differ
    # by ~100%, the run's interval (its fast floor) lies far within that, and sampling stops: a
    # precision no run reaches is not chased to a 30-s cap. The machine's own moves may stop it
    # sooner (a spin moved 3.8% between the halves of 0.3 s here); the step makes sure it stops
    # on a quiet machine too. Beside a CPU hog on each core the rounds are slower, but the step
    # is by the clock, so the halves still differ by it. The widest interval a drift stop leaves
    # is 5% here, not DRIFT_MAX_WIDTH: beside the hogs the fast stretch before the step held a
    # few undisturbed samples, +-1.9%, and the interval of a stretch that is over narrows no more.
    moving = Target("moving", "work()", lambda: (None, None), names=(("work", _stepping_work(0.45)),))
    run = time_targets([moving], TimerConfig(min_time_s=0.3, precision=1e-9, max_time_s=30.0,
                                             drift_max_width=0.05))
    # ~1 s quiet; 4-8 s beside a CPU hog on each core and other work (load 7), where few samples
    # before the step ran undisturbed and each half's interval took longer to narrow.
    assert run.stopped == "drift" and run.wall_s < 15.0, (run.stopped, run.wall_s)
    (timed,) = run.targets
    moved = stats.drift([timed.samples_ns])  # what stopped it, read again from what it kept
    low, high = stats.quantile_ci95(timed.samples_ns)
    width = (high - low) / 2 / stats.headline(timed.samples_ns)
    assert moved.seen and width <= min(abs(moved.shift), 0.05), (moved, width)
    # The same target with the rule off samples on to the cap (the rule, not the step, stopped it).
    held = time_targets([Target("moving", "work()", lambda: (None, None), names=(("work", _stepping_work(0.45)),))],
                        TimerConfig(min_time_s=0.3, precision=1e-9, max_time_s=1.5, drift_max_width=None))
    assert held.stopped == "time cap" and held.wall_s >= 1.5, (held.stopped, held.wall_s)
