"""`python -m planning.train`: what auto picked is printed, and the trainer starts with the resolved options."""

from planning import train as hand_run

DEFAULT_CLUSTER = ["--model", "Qwen/Qwen2.5-1.5B", "--instance-type", "g6.12xlarge", "--workers", "8", "--seq-len", "2048",
                   "--batch-tokens", "65536", "--loss-chunk-tokens", "2048", "--reduce-dtype", "bf16"]


def test_the_hand_run_prints_autos_line_and_starts_the_trainer_with_the_picks(monkeypatch, capsys):
    started = []
    monkeypatch.setattr(hand_run.train, "main", lambda argv: started.append(argv) or 0)
    assert hand_run.main(DEFAULT_CLUSTER + ["--micro-batch", "auto", "--activation-checkpointing", "auto"]) == 0
    # The README's default run on 2 x g6.12xlarge (tests/planning/test_auto.py): micro-batch 4, full recomputation, hybrid.
    assert capsys.readouterr().out.startswith("auto: hybrid+bf16, micro-batch 4 x 1 accumulation, full recomputation")
    [argv] = started
    assert argv[:len(DEFAULT_CLUSTER)] == DEFAULT_CLUSTER
    assert argv[-6:-2] == ["--micro-batch=4", "--activation-checkpointing=full", "--sharding=hybrid", "--precision=bf16"]
    assert argv[-1] == "--predicted-link-gbps=3.000"
