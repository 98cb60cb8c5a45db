"""Optimizers against NumPy references of their papers' equations, and weight-decay exclusion by role."""

import numpy as np
import paddle
import pytest
from paddle.base import core

from kernels import cpu_ops
from modeling import BertConfig, BertForPretraining, BertForQuestionAnswering
from optimizer import ClipGradByGlobalNormInPlace, Lamb, Lans, create_optimizer, no_weight_decay_parameters

BETA1, BETA2, EPSILON, WEIGHT_DECAY = 0.9, 0.999, 1e-6, 0.01
STEPS = 6


class TinyModel(paddle.nn.Layer):
    """A Linear (weight decayed, bias excluded) and a LayerNorm (both excluded)."""

    def __init__(self):
        super().__init__()
        self.dense = paddle.nn.Linear(5, 4)
        self.norm = paddle.nn.LayerNorm(4)


def tiny_model(dtype="float64", seed=0):
    paddle.set_default_dtype(dtype)
    try:
        model = TinyModel()
    finally:
        paddle.set_default_dtype("float32")
    rng = np.random.default_rng(seed)
    for param in model.parameters():
        param.set_value(rng.normal(size=param.shape).astype(dtype))
    model.dense.bias.set_value(np.zeros(4, dtype))  # a zero-norm weight: the trust ratio falls back to 1
    return model


def gradient_sequence(model, scale, seed=1):
    """STEPS gradients per parameter; one step has an all-zero gradient for the LayerNorm bias."""
    rng = np.random.default_rng(seed)
    steps = [{p.name: scale * rng.normal(size=p.shape) for p in model.parameters()} for _ in range(STEPS)]
    steps[2][model.norm.bias.name][:] = 0.0
    return steps


def run(optimizer, model, gradients, scheduler=None):
    """Apply the given gradients (loss = sum <param, gradient>, so d loss / d param = gradient)."""
    for step in gradients:
        loss = sum((p * paddle.to_tensor(step[p.name], dtype=p.dtype)).sum() for p in model.parameters())
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        if scheduler is not None:
            scheduler.step()
    return {p.name: p.numpy().astype(np.float64) for p in model.parameters()}


def clip_by_global_norm(grads, max_norm):
    """Scale all gradients by max_norm / max(global norm, max_norm) (ClipGradByGlobalNorm, apex FusedLAMB)."""
    if max_norm is None:
        return grads
    global_norm = np.sqrt(sum(np.sum(g**2) for g in grads.values()))
    return {name: g * (max_norm / max(global_norm, max_norm)) for name, g in grads.items()}


def trust_ratio(weight, update):
    weight_norm, update_norm = np.linalg.norm(weight), np.linalg.norm(update)
    return weight_norm / update_norm if weight_norm > 0 and update_norm > 0 else 1.0


def reference(rule, weights, gradients, lrs, decayed, max_grad_norm):
    """Run an update rule in float64 NumPy. rule(w, g, m, v, t, lr, wd) -> new w (m, v updated in place)."""
    weights = {name: w.astype(np.float64).copy() for name, w in weights.items()}
    moments = {name: (np.zeros_like(w), np.zeros_like(w)) for name, w in weights.items()}
    for t, (grads, lr) in enumerate(zip(gradients, lrs, strict=True), start=1):
        grads = clip_by_global_norm(grads, max_grad_norm)
        for name in weights:
            wd = WEIGHT_DECAY if name in decayed else 0.0
            weights[name] = rule(weights[name], grads[name], *moments[name], t, lr, wd)
    return weights


def adam_direction(g, m, v, t, betas=(BETA1, BETA2), first_powers=(BETA1, BETA2)):
    """Adam moments with bias correction (Kingma & Ba 2015, Algorithm 1); epsilon outside the root.

    The bias correction uses beta^t = first_power * beta^(t - 1), which is how an optimizer that keeps
    beta^t in an accumulator computes it.
    """
    (beta1, beta2), (first1, first2) = betas, first_powers
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * g * g
    beta1_power, beta2_power = first1 * beta1 ** (t - 1), first2 * beta2 ** (t - 1)
    return (m / (1 - beta1_power)) / (np.sqrt(v / (1 - beta2_power)) + EPSILON)


def lamb_rule(betas=(BETA1, BETA2), first_powers=(BETA1, BETA2)):
    """You et al. 2020 (arXiv:1904.00962) Algorithm 2, with NVIDIA's choice: trust ratio only where wd > 0."""

    def rule(w, g, m, v, t, lr, wd):
        update = adam_direction(g, m, v, t, betas, first_powers) + wd * w
        ratio = trust_ratio(w, update) if wd > 0 else 1.0
        return w - lr * ratio * update

    return rule


def paddle_lamb_rule(dtype):
    # paddle's lamb kernel receives beta1 and beta2 as fp32 attributes, while its beta^t accumulators start at
    # beta in the parameter's dtype; in fp64 the fp32 rounding of 0.999 shows at 6e-6, so model it exactly.
    fp32_betas = (float(np.float32(BETA1)), float(np.float32(BETA2)))
    return lamb_rule(fp32_betas, tuple(float(np.array(beta, dtype)) for beta in (BETA1, BETA2)))


def lans_rule(w, g, m, v, t, lr, wd):
    # Zheng et al. 2020 (arXiv:2006.13484), LANS: normalised gradient, momentum and gradient terms.
    norm = np.linalg.norm(g)
    g = g / (norm + EPSILON) if norm > 0 else g
    momentum_term = adam_direction(g, m, v, t) + wd * w
    gradient_term = g / (np.sqrt(v / (1 - BETA2**t)) + EPSILON) + wd * w
    return (
        w
        - lr * BETA1 * trust_ratio(w, momentum_term) * momentum_term
        - lr * (1 - BETA1) * trust_ratio(w, gradient_term) * gradient_term
    )


def adamw_rule(w, g, m, v, t, lr, wd):
    # Loshchilov & Hutter 2019, Algorithm 2, with the decay scaled by the learning rate as paddle does.
    return w - lr * adam_direction(g, m, v, t) - lr * wd * w


OPTIMIZERS = ["Lamb", "PaddleLamb", "Lans", "AdamW"]


def rule_for(name, dtype):
    # Our Lamb rounds beta1 and beta2 once to the parameter dtype (fp32 here), like its beta^t accumulators.
    rounded = tuple(float(np.array(beta, dtype)) for beta in (BETA1, BETA2))
    rules = {"Lamb": lamb_rule(rounded, rounded), "PaddleLamb": paddle_lamb_rule(dtype), "Lans": lans_rule,
             "AdamW": adamw_rule}
    return rules[name]


def build(name, model, learning_rate, max_grad_norm):
    """create_optimizer, with "Lamb" as our in-place LAMB and "PaddleLamb" as paddle.optimizer.Lamb."""
    kind = "Lamb" if name == "PaddleLamb" else name
    return create_optimizer(kind, model, learning_rate, WEIGHT_DECAY, BETA1, BETA2, EPSILON, max_grad_norm,
                            use_paddle_lamb=name == "PaddleLamb")


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("max_grad_norm, gradient_scale", [(1.0, 3.0), (None, 3.0), (1.0, 0.01)])
def test_optimizer_matches_numpy_reference(name, max_grad_norm, gradient_scale):
    """Six steps on a Linear + LayerNorm in float64 (paddle keeps the learning rate in fp32, hence not tighter);
    large gradients exercise the clipping path."""
    model = tiny_model()
    initial = {p.name: p.numpy() for p in model.parameters()}
    gradients = gradient_sequence(model, gradient_scale)
    lrs = [0.02, 0.05, 0.05, 0.03, 0.01, 0.004]
    scheduler = paddle.optimizer.lr.PiecewiseDecay(boundaries=[1, 3, 4, 5], values=lrs[:1] + lrs[2:])
    optimizer = build(name, model, scheduler, max_grad_norm)
    actual = run(optimizer, model, gradients, scheduler)

    decayed = {model.dense.weight.name}
    expected = reference(rule_for(name, "float64"), initial, gradients, lrs, decayed, max_grad_norm)
    for param_name, value in expected.items():
        np.testing.assert_allclose(actual[param_name], value, rtol=1e-6, atol=1e-9, err_msg=param_name)
        assert not np.allclose(value, initial[param_name])


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_float32_within_1e6_of_reference(name):
    model = tiny_model("float32")
    initial = {p.name: p.numpy() for p in model.parameters()}
    gradients = gradient_sequence(model, 3.0)
    optimizer = build(name, model, 0.01, 1.0)
    actual = run(optimizer, model, gradients)
    expected = reference(rule_for(name, "float32"), initial, gradients, [0.01] * STEPS, {model.dense.weight.name}, 1.0)
    for param_name, value in expected.items():
        np.testing.assert_allclose(actual[param_name], value, rtol=1e-6, atol=1e-7, err_msg=param_name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("gradient_scale", [3.0, 0.01])
def test_in_place_clip_matches_paddles_clip(dtype, gradient_scale):
    """Against paddle.nn.ClipGradByGlobalNorm: above the limit every clipped gradient shrinks by the same
    factor, below it nothing changes; a parameter with need_clip=False neither counts nor is scaled."""
    rng = np.random.default_rng(4)
    params = [paddle.create_parameter(shape, dtype) for shape in ([7, 5], [5], [3, 2])]
    params[2].need_clip = False
    grads = [paddle.to_tensor(gradient_scale * rng.normal(size=p.shape).astype(dtype)) for p in params]
    expected = paddle.nn.ClipGradByGlobalNorm(clip_norm=1.0)(list(zip(params, [g.clone() for g in grads], strict=True)))
    actual = ClipGradByGlobalNormInPlace(clip_norm=1.0)(list(zip(params, grads, strict=True)))
    for (_, want), (_, got), given in zip(expected, actual, grads, strict=True):
        assert got is given  # scaled in place
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    clipped_norm = np.sqrt(sum(np.sum(g.numpy().astype(np.float64) ** 2) for g in grads[:2]))
    if gradient_scale > 1:
        assert clipped_norm == pytest.approx(1.0, rel=1e-6)
    else:
        assert clipped_norm < 1.0  # the case below the limit really is below it


def test_create_optimizer_clips_in_place_on_a_cpu():
    assert type(build("Lamb", tiny_model("float32"), 0.01, 1.0)._grad_clip) is ClipGradByGlobalNormInPlace


def test_create_optimizer_uses_the_fused_cpu_lamb_where_it_builds():
    """Then the reference tests above check the extension's kernel, with the clip folded into it."""
    lamb = build("Lamb", tiny_model("float32"), 0.01, 1.0)
    fused = cpu_ops.load() is not None
    assert (lamb._cpu_ops is not None) == fused
    assert lamb._grad_clip.defer_scaling == fused
    assert not build("Lans", tiny_model("float32"), 0.01, 1.0)._grad_clip.defer_scaling


@pytest.mark.parametrize("optimizer_class", [Lamb, Lans])
def test_multi_precision_keeps_fp32_master_weights(optimizer_class):
    """A bf16 parameter is updated through an fp32 master copy that follows the fp32 reference."""
    rng = np.random.default_rng(3)
    initial = rng.normal(size=(6, 5)).astype(np.float32)
    weight = paddle.create_parameter(
        [6, 5], "bfloat16", default_initializer=paddle.nn.initializer.Assign(initial.astype(np.float32))
    )
    optimizer = optimizer_class(learning_rate=0.05, parameters=[weight], multi_precision=True)
    bf16_gradients = []
    for _ in range(STEPS):
        gradient = paddle.to_tensor(rng.normal(size=(6, 5)).astype(np.float32)).astype("bfloat16")
        bf16_gradients.append({"w": gradient.astype("float32").numpy()})
        (weight.astype("float32") * gradient.astype("float32")).sum().backward()
        optimizer.step()
        optimizer.clear_grad()
    master = optimizer._master_weights[weight.name]
    assert master.dtype == paddle.float32
    start = {"w": weight_start(initial)}
    rounded = tuple(float(np.float32(beta)) for beta in (BETA1, BETA2))
    rule = lans_rule if optimizer_class is Lans else lamb_rule(rounded, rounded)
    expected = reference(rule, start, bf16_gradients, [0.05] * STEPS, {"w"}, None)["w"]
    np.testing.assert_allclose(master.numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(weight.astype("float32").numpy(), master.astype("bfloat16").astype("float32").numpy())


@pytest.mark.parametrize("optimizer_class", [Lamb, Lans])
def test_multi_precision_state_is_created_once(optimizer_class, monkeypatch):
    """fp16 parameters under multi_precision: four accumulators per parameter on the first step, none after."""
    rng = np.random.default_rng(5)
    weights = [paddle.create_parameter([3, 2], "float16", default_initializer=paddle.nn.initializer.Assign(
        rng.normal(size=(3, 2)).astype(np.float16))) for _ in range(2)]
    optimizer = optimizer_class(learning_rate=0.01, parameters=weights, multi_precision=True)
    created = []
    add_accumulator = optimizer._add_accumulator
    monkeypatch.setattr(optimizer, "_add_accumulator", lambda name, param, **kw: (
        created.append((name, param.name)), add_accumulator(name, param, **kw))[1])
    for step in range(3):
        sum((w.astype("float32") * paddle.to_tensor(rng.normal(size=(3, 2)).astype(np.float32))).sum()
            for w in weights).backward()
        optimizer.step()
        optimizer.clear_grad()
        assert len(created) == 4 * len(weights), f"step {step}: {created}"
    masters = {optimizer._master_weights[w.name].name for w in weights}
    assert {param_name for _, param_name in created} == masters  # the state lives on the fp32 master copies


@pytest.mark.parametrize("optimizer_class", [Lamb, Lans])
def test_step_flagged_non_finite_is_skipped(optimizer_class):
    """paddle.amp.GradScaler marks an overflowing step with found_inf; nothing may change then."""
    model = tiny_model("float32")
    optimizer = optimizer_class(learning_rate=0.05, parameters=model.parameters())
    gradients = gradient_sequence(model, 1.0)
    run(optimizer, model, gradients[:1])
    before = {name: value.numpy().copy() for name, value in optimizer.state_dict().items() if name != "LR_Scheduler"}
    weights = {p.name: p.numpy().copy() for p in model.parameters()}
    optimizer._set_auxiliary_var("found_inf", paddle.to_tensor([True]))
    run(optimizer, model, gradients[1:2])
    assert all(np.array_equal(p.numpy(), weights[p.name]) for p in model.parameters())
    assert all(np.array_equal(value.numpy(), before[name]) for name, value in optimizer.state_dict().items())
    optimizer._set_auxiliary_var("found_inf", paddle.to_tensor([False]))
    run(optimizer, model, gradients[2:3])
    assert not np.array_equal(model.dense.weight.numpy(), weights[model.dense.weight.name])


def test_lamb_state_moves_between_paddle_and_our_implementation():
    """An optimizer checkpoint of paddle's Lamb (used on GPUs) resumes in our Lamb (used on CPUs) and back."""
    # Each run names its parameters and optimizer state afresh, as a new process would.
    with paddle.utils.unique_name.guard():
        straight = tiny_model("float32")
        gradients = gradient_sequence(straight, 3.0)
        expected = run(build("PaddleLamb", straight, 0.01, 1.0), straight, gradients)
    for first, second in (("PaddleLamb", "Lamb"), ("Lamb", "PaddleLamb")):
        with paddle.utils.unique_name.guard():
            model = tiny_model("float32")
            optimizer = build(first, model, 0.01, 1.0)
            run(optimizer, model, gradients[:3])
        with paddle.utils.unique_name.guard():
            resumed = build(second, model, 0.01, 1.0)
            resumed.set_state_dict(optimizer.state_dict())
            actual = run(resumed, model, gradients[3:])
        for name, value in expected.items():
            np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=f"{first}->{second} {name}")


def weight_start(initial):
    """The fp32 master copy starts from the bf16-rounded parameter."""
    return paddle.to_tensor(initial).astype("bfloat16").astype("float32").numpy()


def expected_excluded_names(model):
    """The no-decay set of a BertForPretraining, listed layer by layer from the architecture."""
    bert, heads = model.bert, model.cls
    names = {bert.embeddings.layer_norm.weight.name, bert.embeddings.layer_norm.bias.name, bert.pooler.dense.bias.name}
    for layer in bert.encoder:
        attention = layer.attention
        projections = [attention.qkv] if attention.fuse_mha else [attention.query, attention.key, attention.value]
        for linear in [*projections, layer.attention_output, layer.intermediate, layer.output]:
            names.add(linear.bias.name)
        for norm in (layer.attention_layer_norm, layer.output_layer_norm):
            names.update({norm.weight.name, norm.bias.name})
    names.update({heads.transform.bias.name, heads.transform_layer_norm.weight.name,
                  heads.transform_layer_norm.bias.name, heads.decoder_bias.name, heads.seq_relationship.bias.name})
    return names


@pytest.mark.parametrize("fuse_mha", [False, True])
def test_no_weight_decay_parameters_by_role(fuse_mha):
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, fuse_mha=fuse_mha)
    model = BertForPretraining(config)
    excluded = no_weight_decay_parameters(model)
    assert excluded == expected_excluded_names(model)
    assert len(excluded) == 2 * (10 if not fuse_mha else 8) + 2 + 1 + 5
    decayed = {p.name for p in model.parameters()} - excluded
    assert model.bert.embeddings.word_embeddings.weight.name in decayed
    assert all(p.ndim == 2 for p in model.parameters() if p.name in decayed)


def test_no_weight_decay_parameters_of_a_fine_tuning_model():
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    model = BertForQuestionAnswering(config)
    excluded = no_weight_decay_parameters(model)
    assert model.qa_outputs.bias.name in excluded
    assert model.qa_outputs.weight.name not in excluded


def test_create_optimizer_rejects_bad_arguments():
    model = tiny_model("float32")
    with pytest.raises(ValueError, match="unknown optimizer"):
        create_optimizer("SGD", model, 0.1, 0.01, BETA1, BETA2, EPSILON, 1.0)
    with pytest.raises(ValueError, match="max_grad_norm"):
        create_optimizer("Lamb", model, 0.1, 0.01, BETA1, BETA2, EPSILON, 0.0)
    with pytest.raises(ValueError, match="beta1"):
        Lans(parameters=model.parameters(), beta1=1.0)


def lamb_kernel_dtype_rule(real_lamb):
    """_C_ops.lamb_ with its GPU kernel's dtype rule (paddle/phi/kernels/impl/lamb_kernel_impl.h, Paddle 3.3):
    the kernel is chosen by the parameter's dtype T and reads the gradient as grad.data<T>(), which refuses a
    gradient of another dtype ("The type of data we are trying to retrieve does not match")."""

    def lamb_(param, grad, *rest):
        if grad.dtype != param.dtype:
            raise RuntimeError(f"lamb kernel: {grad.dtype} gradient for a {param.dtype} parameter")
        return real_lamb(param, grad, *rest)

    return lamb_


def test_pure_fp16_lamb_on_a_gpu_steps_with_fp32_master_gradients(monkeypatch):
    """--use-pure-fp16 on a GPU: float16 Linear weights (LayerNorm stays fp32, as amp_initialize leaves it),
    fp32 gradients from decorate's master_grad hook, and the optimizer create_optimizer picks for a GPU with
    multi_precision. Its fp32 master weights must follow the fp64 LAMB reference (clip included)."""
    monkeypatch.setattr(paddle._C_ops, "lamb_", lamb_kernel_dtype_rule(paddle._C_ops.lamb_))
    monkeypatch.setattr(paddle, "get_device", lambda: "gpu:0")
    model = tiny_model("float32")
    model.dense.to(dtype="float16")
    start = {p.name: p.numpy().astype(np.float64) for p in model.parameters()}  # fp16-rounded where fp16
    gradients = gradient_sequence(model, 3.0)
    optimizer = create_optimizer("Lamb", model, 0.01, WEIGHT_DECAY, BETA1, BETA2, EPSILON, 1.0, multi_precision=True)
    for step in gradients:
        loss = sum((p.astype("float32") * paddle.to_tensor(step[p.name], dtype="float32")).sum()
                   for p in model.parameters())
        loss.backward()
        assert model.dense.weight.grad.dtype == paddle.float16
        core.eager.set_master_grads(model.parameters())  # decorate's master_grad_hook (auto_cast.py)
        assert model.dense.weight.grad.dtype == paddle.float32
        optimizer.step()
        optimizer.clear_grad()
    # The fp16 gradients were those of the fp32 values rounded to fp16 (the cast's backward).
    rounded = [{name: g.astype(np.float16).astype(np.float64) if "linear" in name else g for name, g in step.items()}
               for step in gradients]
    betas = tuple(float(np.float32(beta)) for beta in (BETA1, BETA2))
    expected = reference(lamb_rule(betas, betas), start, rounded, [0.01] * STEPS, {model.dense.weight.name}, 1.0)
    weight = model.dense.weight
    master = optimizer._master_weights[weight.name]
    np.testing.assert_allclose(master.numpy(), expected[weight.name], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(weight.numpy(), master.astype("float16").numpy())
    np.testing.assert_allclose(model.norm.weight.numpy(), expected[model.norm.weight.name], rtol=1e-5, atol=1e-6)
