"""The small decoder and the Markov-chain task that pytorch/10 and pytorch/12 train on."""

import math

import pytest

torch = pytest.importorskip("torch")

from mptutor import torch as mpt  # noqa: E402


def test_samples_are_seeded_and_follow_the_chain():
    chain = mpt.MarkovChain(vocab=4, length=6, seed=3)
    x = chain.sample(20_000, seed=5)
    assert x.shape == (20_000, 7) and x.dtype == torch.long
    assert torch.equal(x, chain.sample(20_000, seed=5))
    assert not torch.equal(x, chain.sample(20_000, seed=6))
    # the share of each next token after a frequent pair matches P within 5 standard deviations
    a, b = x[:, 2:-1].flatten(), x[:, 3:].flatten()
    prev = x[:, 1:-2].flatten()
    mask = (prev == 0) & (a == 1)
    n = int(mask.sum())
    assert n > 1000
    shares = torch.bincount(b[mask], minlength=4).double() / n
    p = chain.P[0, 1].double()
    assert torch.all((shares - p).abs() <= 5 * torch.sqrt(p * (1 - p) / n) + 1e-12)


def test_the_chain_own_logits_reach_the_floor_loss():
    chain = mpt.MarkovChain()
    x = chain.sample(256, seed=1)
    # logits at position t predict x[:, t + 1] from x[:, t - 1], x[:, t]; position 0 is unscored
    logits = torch.zeros(256, chain.length, chain.vocab)
    logits[:, 1:] = chain.P[x[:, :-2], x[:, 1:-1]].log()
    loss = mpt.next_token_loss(logits, x)
    assert torch.allclose(loss, chain.floor_loss(x), rtol=1e-6)
    # a uniform guess costs ln(vocab), more than the floor
    uniform = mpt.next_token_loss(torch.zeros(256, chain.length, chain.vocab), x)
    assert math.isclose(uniform.item(), math.log(chain.vocab), rel_tol=1e-6)
    assert chain.floor_loss(x) < uniform


def test_decoder_shapes_seed_and_linear_layers():
    torch.manual_seed(0)
    a = mpt.Decoder()
    torch.manual_seed(0)
    b = mpt.Decoder()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    x = mpt.MarkovChain().sample(3, seed=0)
    logits = a(x[:, :-1])
    assert logits.shape == (3, 16, 16)
    names = [n for n, m in a.named_modules() if isinstance(m, torch.nn.Linear)]
    assert names == [f"blocks.{i}.{n}" for i in range(2) for n in
                     ("qkv", "out", "gate", "up", "down")] + ["head"]
    # causal: changing the last input token leaves every earlier position's logits unchanged
    y = x[:, :-1].clone()
    y[:, -1] = (y[:, -1] + 1) % 16
    assert torch.allclose(a(y)[:, :-1], logits[:, :-1], atol=1e-6)


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda: mpt.MarkovChain(vocab=1), ValueError),
        (lambda: mpt.MarkovChain(length=2.5), TypeError),
        (lambda: mpt.MarkovChain().sample(0, seed=0), ValueError),
        (lambda: mpt.MarkovChain().sample(4, seed=-1), ValueError),
        (lambda: mpt.MarkovChain().floor_loss(torch.zeros(2, 5, dtype=torch.long)), ValueError),
        (lambda: mpt.MarkovChain().floor_loss(torch.full((2, 17), 16)), ValueError),
        (lambda: mpt.MarkovChain().floor_loss([[0] * 17]), TypeError),
        (lambda: mpt.Decoder(width=30, heads=4), ValueError),
        (lambda: mpt.Decoder(layers=True), TypeError),
        (lambda: mpt.Decoder()(torch.zeros(2, 17, dtype=torch.long)), ValueError),
        (lambda: mpt.next_token_loss(torch.zeros(2, 16, 16), torch.zeros(2, 16, dtype=torch.long)),
         ValueError),
    ],
)
def test_bad_input_is_refused(make, error):
    with pytest.raises(error):
        make()
