"""One benchmark worker per GPU (under torchrun): builds each case's model in the group's process group, times
its steps, the GPU's matmul rate and the links' bandwidth, and writes rank 0's rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.levers import LEVERS, attention_backend
from benchmarks.suites import Case
from training.config import TrainConfig
from training.fp8 import FP8_MIN_CAPABILITY


# The example's recipe: FSDP1, size_based_auto_wrap_policy(min_num_params=1e7), bf16 everywhere.
EXAMPLE_WRAP_MIN_PARAMS = int(1e7)
FP8_CUBE = "fp8 8192x8192x8192"


def worker(group_file: str, out: str, model_name: str, warmup: int, steps: int) -> None:
    import torch
    import torch.distributed as dist

    spec = json.loads(Path(group_file).read_text())
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    results_dir = Path(out) / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    if spec["measure_matmul"] and cuda:
        shapes = matmul_rates(device)
        gathered: list = [None] * world
        dist.all_gather_object(gathered, shapes)
        if rank == 0:
            (results_dir / "matmul.json").write_text(json.dumps({"per_rank": gathered, "device": torch.cuda.get_device_name(device)}, indent=1))
    if spec.get("measure_links") and cuda:
        links = link_bandwidth(device, model_name)
        if rank == 0:
            (results_dir / f"links-{spec['name']}.json").write_text(json.dumps(links, indent=1))
    bases: dict[str, dict] = {}  # one random init per model, kept while its cases run
    for raw in spec["cases"]:
        case = Case(**raw)
        cfg = case.train_config(case.model or model_name)
        full_state = None
        if case.recipe == "trainer":
            from training.model import full_state_dict_on_rank0, model_config, with_adapters

            if cfg.model not in bases:
                bases = {cfg.model: full_state_dict_on_rank0(dataclasses.replace(cfg, lora_rank=0), model_config(cfg))
                         if rank == 0 else {}}
            full_state = bases[cfg.model]
            if cfg.lora_rank and rank == 0:
                full_state = with_adapters(full_state, cfg, model_config(cfg))
        result = run_case(case, cfg, device, rank, world, full_state, warmup, steps, spec.get("gpus_per_node"))
        result |= {"group": spec["name"], "world_size": world, "env": spec["env"]}
        if rank == 0:
            print(json.dumps(result), flush=True)
            slug = "".join(c if c.isalnum() else "-" for c in f"{spec['name']}-{case.name}")
            (results_dir / f"{slug}.json").write_text(json.dumps(result, indent=1))
    dist.destroy_process_group()


def run_case(case: Case, cfg: TrainConfig, device, rank: int, world: int, full_state, warmup: int, steps: int,
             gpus_per_node: int | None = None) -> dict:
    import torch

    from training.metrics import model_flops_per_token, peak_memory_gib

    result = {"name": case.name, "recipe": case.recipe, "levers": list(case.levers), "settings": dataclasses.asdict(cfg),
              "memory_cap_gib": case.memory_cap_gib, "tokens_per_step_per_gpu": cfg.tokens_per_step_per_worker}
    if device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(
            min(1.0, case.memory_cap_gib * 2**30 / torch.cuda.get_device_properties(device).total_memory)
            if case.memory_cap_gib else 1.0, device)
        torch.cuda.reset_peak_memory_stats(device)
        result["device"] = torch.cuda.get_device_name(device)
    if case.recipe != "trainer" and device.type != "cuda":
        return result | {"error": "FSDP1 needs a GPU" if case.recipe == "example" else "Liger's kernels need a GPU"}
    if device.type == "cuda":
        torch._dynamo.reset()  # each case compiles afresh: no recompile limit reached, no graph of another lever
    model = optimizer = step = None
    try:
        with contextlib.ExitStack() as levers:
            for name in case.levers:
                levers.enter_context(LEVERS[name]())
            if device.type == "cuda":
                try:
                    result["attention_backend"] = attention_backend(device, cfg)
                except Exception as error:  # a probe, not the measurement
                    result["attention_backend"] = f"unknown ({type(error).__name__}: {error})"[:200]
            if case.recipe == "trainer":
                model, optimizer, step = _trainer_step(cfg, device, rank, world, full_state, gpus_per_node,
                                                       case.legacy_bf16_accumulation)
            elif case.recipe == "liger":
                model, optimizer, step = _peer_step(cfg, device, rank, world)
            elif case.recipe == "fp8-peer":
                model, optimizer, step = _fp8_peer_step(cfg, device, rank, world)
            else:
                model, optimizer, step = _example_step(cfg, device, rank, world)
            result["flops_per_token"] = model_flops_per_token(_meta_model(cfg), cfg.seq_len)
            timing = time_steps(step, warmup, cfg.steps if cfg.data == "pattern" else steps, device)
        result |= timing | {"peak_mem_gib": peak_memory_gib(device),
                            "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30 if device.type == "cuda" else 0.0}
        if case.evaluate_batches:
            result["val_loss"] = _validation_loss(model, cfg, device, rank, world, case.evaluate_batches)
    except torch.OutOfMemoryError as error:
        result |= {"error": "out of memory", "detail": str(error).splitlines()[0][:300],
                   "peak_mem_gib": peak_memory_gib(device)}
    except Exception as error:  # one broken variant must not cost the rest of the suite
        import traceback

        traceback.print_exc()
        result |= {"error": type(error).__name__, "detail": str(error).splitlines()[0][:300] if str(error) else ""}
    finally:
        # The step closes over the model and optimizer, and FSDP's hooks make cycles: all three go before the
        # collection, or the next case runs beside this one's weights (and counts them in its peak memory).
        del model, optimizer, step
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    return result


def _meta_model(cfg: TrainConfig):
    import torch
    from transformers import AutoModelForCausalLM

    from training.model import CausalLMWithLoss, model_config

    with torch.device("meta"):
        return CausalLMWithLoss(AutoModelForCausalLM.from_config(model_config(cfg)))


def _validation_loss(model, cfg: TrainConfig, device, rank: int, world: int, batches: int) -> float:
    """Mean loss over held-out synthetic sequences (the stream train_func validates on)."""
    import itertools

    from training.data import VALIDATION_SEED_OFFSET, synthetic_batches
    from training.step import evaluate

    held = list(itertools.islice(synthetic_batches(cfg.data, cfg.seed + VALIDATION_SEED_OFFSET, model.config.vocab_size,
                                                   cfg.seq_len, cfg.micro_batch, rank, world), batches))
    return evaluate(model, held, device)[0]


def _trainer_step(cfg: TrainConfig, device, rank: int, world: int, full_state, gpus_per_node: int | None = None,
                  legacy_bf16_accumulation: bool = False):
    """The trainer's own pieces, exactly as train_func wires them (the mesh from the emulated nodes)."""
    import training.model
    from training.data import synthetic_batches
    from training.fp8 import after_optimizer_step
    from training.model import build_model, device_mesh
    from training.schedule import lr_at
    from training.step import make_optimizer, train_step

    per_node = gpus_per_node or world
    sharding = "full" if cfg.sharding == "auto" else cfg.sharding
    mesh = device_mesh(device, sharding, world // per_node, per_node)
    policy = training.model.MixedPrecisionPolicy
    if legacy_bf16_accumulation:  # FSDP2 accumulates in the reduce dtype: make it the compute dtype
        training.model.MixedPrecisionPolicy = lambda **kw: policy(**{**kw, "reduce_dtype": kw.get("param_dtype")})
    try:
        model = build_model(cfg, device, rank, world, full_state, mesh=mesh)
    finally:
        training.model.MixedPrecisionPolicy = policy
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, device)
    batches = synthetic_batches(cfg.data, cfg.seed, model.config.vocab_size, cfg.seq_len, cfg.micro_batch, rank, world)

    def step(i: int):
        lr = lr_at(i, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
        return train_step(model, optimizer, batches, cfg.grad_accum, cfg.grad_clip, lr, device,
                          keep_weights_gathered=not cfg.reshard_after_forward,
                          after_update=after_optimizer_step if cfg.precision == "fp8" else None).loss

    return model, optimizer, step


def _example_step(cfg: TrainConfig, device, rank: int, world: int):
    """The example's recipe: FSDP1 over a bf16 model, size-based wrapping, bf16 AdamW, HF loss."""
    import functools

    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
    from transformers import AutoModelForCausalLM

    from training.data import synthetic_batches
    from training.model import model_config

    torch.manual_seed(cfg.seed)
    with device:
        lm = AutoModelForCausalLM.from_config(model_config(cfg), dtype=torch.bfloat16)
    model = FSDP(lm, auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=EXAMPLE_WRAP_MIN_PARAMS),
                 device_id=device if device.type == "cuda" else None, sync_module_states=world > 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    batches = synthetic_batches("random", cfg.seed, lm.config.vocab_size, cfg.seq_len, cfg.micro_batch, rank, world)

    def step(i: int):
        input_ids = next(batches)["input_ids"].to(device)
        loss = model(input_ids=input_ids, labels=input_ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return model, optimizer, step


def _peer_step(cfg: TrainConfig, device, rank: int, world: int):
    """The peer recipe (PEER_MODULE): Hugging Face's model with Liger's kernels patched in, as TRL's
    use_liger_kernel does; FSDP2 per decoder layer and the root, bf16 compute, fp32 weights and
    reduction, weights resharded after forward (FSDP2's default); Hugging Face's mean loss."""
    import torch
    from liger_kernel.transformers import apply_liger_kernel_to_qwen2
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoModelForCausalLM

    from training.data import synthetic_batches
    from training.model import model_config

    torch.manual_seed(cfg.seed)
    with device:
        lm = AutoModelForCausalLM.from_config(model_config(cfg), dtype=torch.float32, attn_implementation="sdpa")
    apply_liger_kernel_to_qwen2(model=lm)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in lm.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(lm, mp_policy=mp)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=cfg.lr, fused=True)
    batches = synthetic_batches("random", cfg.seed, lm.config.vocab_size, cfg.seq_len, cfg.micro_batch, rank, world)
    return lm, optimizer, _hf_peer_step(lm, optimizer, batches, device)


def _fp8_peer_step(cfg: TrainConfig, device, rank: int, world: int):
    """An FP8 recipe as torchtitan's float8 docs and accelerate's torchao backend write it: Hugging Face's model,
    torchao's tensorwise float8 on every linear layer but the LM head (dimensions divisible by 16, torchao's
    filter), weights all-gathered in float8 and their scales precomputed after each optimizer step, each decoder
    layer compiled, FSDP2 per layer and the root, Liger's fused linear cross-entropy."""
    import torch
    from liger_kernel.transformers import apply_liger_kernel_to_qwen2
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training, precompute_float8_dynamic_scale_for_fsdp
    from transformers import AutoModelForCausalLM

    from training.data import synthetic_batches
    from training.model import model_config

    torch.manual_seed(cfg.seed)
    with device:
        lm = AutoModelForCausalLM.from_config(model_config(cfg), dtype=torch.float32, attn_implementation="sdpa")
    apply_liger_kernel_to_qwen2(model=lm)
    convert_to_float8_training(lm, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),
                               module_filter_fn=lambda m, fqn: fqn != "lm_head" and m.in_features % 16 == 0
                               and m.out_features % 16 == 0)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in lm.model.layers:
        layer.compile()
        fully_shard(layer, mp_policy=mp)
    fully_shard(lm, mp_policy=mp)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=cfg.lr, fused=True)
    batches = synthetic_batches("random", cfg.seed, lm.config.vocab_size, cfg.seq_len, cfg.micro_batch, rank, world)
    return lm, optimizer, _hf_peer_step(lm, optimizer, batches, device,
                                        after_update=lambda: precompute_float8_dynamic_scale_for_fsdp(lm))


def time_steps(step, warmup: int, steps: int, device) -> dict:
    """Mean step time over `steps` after `warmup` (compilation, allocator growth), plus the spread.

    The steps run back to back, as the training loop runs them: the GPU is synchronised before the first and
    after the last only, so the next step's launch overlaps the update as it does in training. A step's time
    is then the host's, from one step's return to the next (the trainer's returns once its loss is known; a
    recipe that returns its loss on the device may run ahead, and only the mean is its step time)."""
    import torch
    import torch.distributed as dist

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    first_loss, losses = None, []
    started = time.perf_counter()
    for i in range(warmup):
        loss = step(i)
        first_loss = first_loss if first_loss is not None else float(loss)
        losses.append(float(loss))
    sync()
    warmup_s = time.perf_counter() - started
    dist.barrier()
    per_step, timed = [], []
    begin = previous = time.perf_counter()
    for i in range(warmup, warmup + steps):
        timed.append(step(i))  # a recipe returning a device tensor is read after the loop, not per step
        now = time.perf_counter()
        per_step.append(now - previous)
        previous = now
    sync()
    total = time.perf_counter() - begin
    losses += [float(loss) for loss in timed]
    final_loss = losses[-1]
    if final_loss != final_loss:
        raise RuntimeError("the loss is NaN")
    return {"warmup_s": warmup_s, "steps_timed": steps, "step_time_s": total / steps,
            "step_time_min_s": min(per_step), "step_time_max_s": max(per_step),
            "step_time_median_s": statistics.median(per_step), "first_loss": first_loss, "final_loss": final_loss,
            "losses": losses}


def link_bandwidth(device, model_name: str, repeats: int = 5) -> dict:
    """NCCL bus bandwidth (GB/s) of the collectives FSDP2 issues for this model, at their own sizes:
    one decoder layer and the root, bf16 gathers and fp32 reductions (NCCL's busbw convention)."""
    import torch
    import torch.distributed as dist

    from planning.workload import MODELS

    shape, world = MODELS[model_name], dist.get_world_size()
    layer = shape.layer_params // shape.layers
    sizes = {"layer": layer, "root": shape.root_params}
    factor = {"all_gather": (world - 1) / world, "reduce_scatter": (world - 1) / world, "all_reduce": 2 * (world - 1) / world}
    results = {}
    for unit, numel in sizes.items():
        for op, dtype in (("all_gather", torch.bfloat16), ("reduce_scatter", torch.float32), ("all_reduce", torch.float32)):
            numel -= numel % world
            full = torch.ones(numel, dtype=dtype, device=device)
            part = torch.ones(numel // world, dtype=dtype, device=device)

            def once():
                if op == "all_gather":
                    dist.all_gather_into_tensor(full, part)
                elif op == "reduce_scatter":
                    dist.reduce_scatter_tensor(part, full)
                else:
                    dist.all_reduce(full)

            once()
            torch.cuda.synchronize(device)
            dist.barrier()
            started = time.perf_counter()
            for _ in range(repeats):
                once()
            torch.cuda.synchronize(device)
            seconds = (time.perf_counter() - started) / repeats
            size = numel * full.element_size()
            results[f"{op} {unit}"] = {"bytes": size, "seconds": seconds, "busbw_gbps": size * factor[op] / seconds / 1e9}
            del full, part
    torch.cuda.empty_cache()
    return results


def matmul_rates(device, repeats: int = 20) -> dict:
    """bf16 matmul TFLOP/s on random data: an 8192 cube (the peak MFU is measured against) and this model's shapes."""
    import torch

    shapes = {"8192x8192x8192": (8192, 8192, 8192), "lm_head 32768x1536x151936": (32768, 1536, 151936),
              "gate+up 32768x1536x17920": (32768, 1536, 17920), "down 32768x8960x1536": (32768, 8960, 1536),
              "qkv 32768x1536x2048": (32768, 1536, 2048)}
    rates = {}
    for name, (m, k, n) in shapes.items():
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        rates[name] = 2 * m * k * n / statistics.median(times) / 1e12
        del a, b
    if torch.cuda.get_device_capability(device) >= FP8_MIN_CAPABILITY:
        rates[FP8_CUBE] = fp8_matmul_rate(device, 8192, repeats)
    torch.cuda.empty_cache()
    return rates


def fp8_matmul_rate(device, n: int, repeats: int) -> float:
    """e4m3 x e4m3 -> bf16 TFLOP/s of an n-cube on random data, tensorwise scales (what float8 training's GEMMs run)."""
    import torch

    a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
    one = torch.ones((), device=device)
    for _ in range(3):
        torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return 2 * n**3 / statistics.median(times) / 1e12


def _median_seconds(run, repeats: int) -> float:
    """Median device time of run() over `repeats` calls, after three untimed ones."""
    import torch

    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return statistics.median(times)


def linear_gemm_rates(device, model_name: str, token_counts: tuple[int, ...], repeats: int = 20) -> dict:
    """TFLOP/s of the three GEMMs of each linear layer that fp8 converts (training.fp8.FP8_LINEARS), in bf16 and in
    float8 as torchao's tensorwise recipe runs them (e4m3 operands, one scale each, bf16 out; fast accumulation in
    the forward GEMM only, torchao's default), at each number of tokens per micro-batch: forward (tokens x in ->
    out), gradient of the input (tokens x out -> in) and of the weight (out x tokens -> in). Random data.
    Returns {tokens: {"<layer> <gemm>": {"gflop": ..., "bf16": TFLOP/s, "fp8": TFLOP/s}}}."""
    import torch

    from training.model import builtin_config

    config = builtin_config(model_name)
    hidden, intermediate = config.hidden_size, config.intermediate_size
    layers = {"q_proj/o_proj": (hidden, hidden), "gate_proj/up_proj": (hidden, intermediate),
              "down_proj": (intermediate, hidden)}
    one = torch.ones((), device=device)
    rates: dict = {}
    for tokens in token_counts:
        rows = rates[str(tokens)] = {}
        for layer, (d_in, d_out) in layers.items():
            for gemm, (m, k, n) in {"forward": (tokens, d_in, d_out), "grad_input": (tokens, d_out, d_in),
                                    "grad_weight": (d_out, tokens, d_in)}.items():
                a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
                b = torch.randn(n, k, device=device, dtype=torch.bfloat16).t()
                a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()  # b column-major
                fast = gemm == "forward"
                bf16_s = _median_seconds(lambda: a @ b, repeats)
                fp8_s = _median_seconds(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16,
                                                                 use_fast_accum=fast), repeats)
                flops = 2 * m * k * n
                rows[f"{layer} {gemm}"] = {"gflop": flops / 1e9, "bf16": flops / bf16_s / 1e12, "fp8": flops / fp8_s / 1e12}
                del a, b, a8, b8
    torch.cuda.empty_cache()
    return rates


def _hf_peer_step(lm, optimizer, batches, device, after_update=lambda: None):
    """A peer's step as Hugging Face users write it: the model's own loss, clipping, AdamW (then after_update)."""
    import torch

    def step(i: int):
        input_ids = next(batches)["input_ids"].to(device)
        loss = lm(input_ids=input_ids, labels=input_ids, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        optimizer.step()
        after_update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step
