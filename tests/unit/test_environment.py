"""setup() / pick_device(): COURSE_DEVICE and the device argument name a device this machine has, or fail clearly."""

import pytest
import torch

from course_utils import environment
from course_utils.environment import pick_device, setup


@pytest.fixture
def machine(monkeypatch):
    """Pretend to be a machine with ``gpus`` CUDA GPUs and, or not, Apple's MPS."""

    def pretend(gpus=0, mps=False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)

    return pretend


@pytest.mark.parametrize(
    "value, gpus, mps, expected",
    [
        ("cpu", 0, False, "cpu"),
        ("CPU", 0, False, "cpu"),  # case is ignored ...
        (" cpu", 0, False, "cpu"),  # ... and so are surrounding spaces
        ("cpu\n", 1, False, "cpu"),
        ("cuda", 1, False, "cuda"),
        ("cuda:0", 1, False, "cuda:0"),
        ("Cuda:1 ", 2, False, "cuda:1"),
        ("mps", 0, True, "mps"),
    ],
)
def test_accepted_values(machine, monkeypatch, value, gpus, mps, expected):
    machine(gpus, mps)
    monkeypatch.setenv("COURSE_DEVICE", value)
    assert pick_device() == torch.device(expected)
    monkeypatch.delenv("COURSE_DEVICE")
    assert pick_device(value) == torch.device(expected)


@pytest.mark.parametrize(
    "value, gpus, mps, why",
    [
        ("bogus", 0, False, "it is not a device name"),
        ("gpu", 1, False, "it is not a device name"),
        ("cuda:", 1, False, "it is not a device name"),
        ("cuda", 0, False, "this machine has no such device"),
        ("cuda:0", 0, False, "this machine has no such device"),
        ("mps", 0, False, "this machine has no such device"),
        ("cuda:7", 1, False, "this machine has no such device"),
        ("cuda:1", 1, True, "this machine has no such device"),
    ],
)
def test_refused_values_name_the_variable_and_list_what_is_accepted(machine, monkeypatch, value, gpus, mps, why):
    machine(gpus, mps)
    accepted = ["'cpu'"] + (["'cuda'", "'cuda:0'"] if gpus else []) + (["'mps'"] if mps else [])
    monkeypatch.setenv("COURSE_DEVICE", value)
    for call in (pick_device, lambda: setup(quiet=True)):
        with pytest.raises(ValueError) as info:
            call()
        message = str(info.value)
        assert message.startswith(f"COURSE_DEVICE={value!r}: {why}")
        assert f"Accepted here: {', '.join(accepted)} (" in message
        assert "case and surrounding spaces are ignored" in message
    # the same value passed as setup(device=...) names the argument, not the variable
    monkeypatch.delenv("COURSE_DEVICE")
    with pytest.raises(ValueError, match=f"^device={value!r}: {why}"):
        setup(device=value, quiet=True)


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_course_device_counts_as_unset(machine, monkeypatch, value):
    machine(gpus=0)
    monkeypatch.setenv("COURSE_DEVICE", value)
    assert pick_device() == torch.device("cpu")
    machine(gpus=1)
    assert pick_device() == torch.device("cuda")


def test_the_argument_wins_over_the_variable(machine, monkeypatch):
    machine(gpus=0)
    monkeypatch.setenv("COURSE_DEVICE", "bogus")
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device(torch.device("cpu")) == torch.device("cpu")


def test_a_device_of_the_wrong_type_is_refused(machine):
    machine(gpus=0)
    with pytest.raises(TypeError, match="device must be a device name"):
        pick_device(0)


def test_the_real_machine_accepts_its_own_default(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    default = pick_device()
    assert pick_device(str(default)) == default
    assert environment._available_devices()[0] == "cpu"


def test_a_refused_device_changes_nothing(machine, monkeypatch):
    machine(gpus=0)
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    options = torch._tensor_str.PRINT_OPTS
    monkeypatch.setattr(options, "precision", 7)
    with pytest.raises(ValueError, match="COURSE_DEVICE"):
        setup(seed=0, quiet=True)
    assert options.precision == 7 and torch.equal(torch.rand(1), expected)  # not re-seeded, print options kept


@pytest.fixture
def restored_flags(monkeypatch):
    """The global switches reproducible_on turns, put back after the test."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2], saved[3]
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[4], saved[5]
    torch.set_float32_matmul_precision(saved[6])


def test_a_gpu_run_is_deterministic_and_without_tf32(restored_flags):
    import os

    from course_utils.environment import reproducible_on

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    reproducible_on(torch.device("cuda:0"))
    assert torch.are_deterministic_algorithms_enabled() and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest"


def test_a_cpu_run_changes_no_global_switch(restored_flags):
    import os

    from course_utils.environment import reproducible_on

    before = torch.are_deterministic_algorithms_enabled()
    reproducible_on("cpu")
    assert torch.are_deterministic_algorithms_enabled() == before and "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_setup_on_a_gpu_makes_the_run_reproducible(machine, restored_flags):
    machine(gpus=1)
    torch.use_deterministic_algorithms(False)
    setup(device="cuda", quiet=True)
    assert torch.are_deterministic_algorithms_enabled() and not torch.backends.cuda.matmul.allow_tf32
