"""`python -m benchmarks --device cuda` under the simulator: a smoke test of the suite's CUDA
path (verglas against numpy, quick sizes), on the programs that run in seconds there."""

from benchmarks import run

PROGRAMS = "ew_chain,sum,mlp_fwd,call_overhead,scan_ew,scan_rnn,ofg_once"


def test_the_cuda_suite_runs_and_matches_numpy(capsys):
    assert run.main(["--device", "cuda", "--programs", PROGRAMS, "--repeat", "1"]) == 0
    out, err = capsys.readouterr()
    assert "smoke test" in err
    assert "MISMATCH" not in out + err and "error:" not in out, out + err
    for program in PROGRAMS.split(","):
        assert program in out, out
