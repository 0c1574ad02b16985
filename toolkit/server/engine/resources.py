"""How much of the machine the engine and the trainer take: torch threads and resident LoRA bytes.

No torch import here: the settings (and ``toolkit keys create``) read these defaults cheaply."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEFAULT_THREADS = 2
SPIN_COUNT = "100"
SERIAL_WORK = 64_000_000
"""Parameters x tokens of a forward below which the engine runs it on one torch thread (the built-in
1M-parameter model decoding a batch of up to 64, or prefilling up to ~60 tokens)."""
LORA_BYTES = 1 << 30
"""Default cap on the bytes of resident LoRA adapters per base model (``--max-lora-memory``)."""
KV_CACHE_BYTES_CPU = 1 << 30
"""Default KV cache budget per base model on the CPU (``--kv-cache-memory-bytes``): SmolLM2-135M's
keys and values take 46 KB a token in float32, so 1 GiB holds some 23,000 tokens (64 agent episodes
of 350); only the blocks in use take memory."""
KV_CACHE_SHARE_CUDA = 0.25
"""Default KV cache budget on a GPU: this share of the device's memory."""


def kv_cache_budget(device: torch.device) -> int:
    """The default KV cache budget in bytes on ``device``."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(device).total_memory * KV_CACHE_SHARE_CUDA)
    return KV_CACHE_BYTES_CPU


def torch_threads() -> int:
    """``$TOOLKIT_TORCH_THREADS``, else 2: each of the engine's scheduler thread and the training job
    worker runs torch on this many threads. Two suit the tiny built-in model on the 2-core machines
    the toolkit targets; set 1 when several servers share the cores (the test suite's two workers
    do), since torch's threads spin while they wait and two processes of two threads on two cores
    slow each other several-fold."""
    raw = os.environ.get("TOOLKIT_TORCH_THREADS", "").strip()
    if not raw:
        return DEFAULT_THREADS
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"TOOLKIT_TORCH_THREADS must be a whole number of at least 1, not {raw!r}")
    return int(raw)


def _device_sampling_setting(cuda: bool) -> str:
    raw = os.environ.get("TOOLKIT_DEVICE_SAMPLING", "").strip()
    if raw not in ("", "0", "1", "device"):
        raise ValueError(f"TOOLKIT_DEVICE_SAMPLING must be 0, 1 or device, not {raw!r}")
    return raw or ("device" if cuda else "0")


def device_sampling(cuda: bool = False) -> bool:
    """Whether the engine samples where the logits are (a GPU: its logits no longer come to the CPU
    each step): ``$TOOLKIT_DEVICE_SAMPLING`` set to 1 or ``device``, or unset on a CUDA device. With 1
    the random numbers still come from each request's CPU generator, so a seed draws the same numbers
    as on the CPU. 0 samples on the CPU, the default on the CPU."""
    return _device_sampling_setting(cuda) in ("1", "device")


def device_random(cuda: bool = False) -> bool:
    """Whether the random numbers are drawn on the device too, each seeded request from a device
    generator of its own (:class:`.sampling.DeviceRandom`): ``$TOOLKIT_DEVICE_SAMPLING=device``, or
    unset on a CUDA device. A seed then gives the same tokens on that kind of device whatever the
    batch, not the CPU's tokens."""
    return _device_sampling_setting(cuda) == "device"


def available_memory() -> int | None:
    """Bytes this process may still take: the system's available memory (``MemAvailable``), less
    where a cgroup (a container's limit) allows less; None where neither can be read (not Linux)."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    with contextlib.suppress(OSError, ValueError):
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        if limit.isdigit():
            found.append(int(limit) - int((cgroup / "memory.current").read_text()))
    return min(found) if found else None


def huge_pages() -> None:
    """Call before torch is imported (``toolkit serve`` does): unless the user chose
    (``THP_MEM_ALLOC_ENABLE``), torch aligns each allocation of 2 MB or more to 2 MB and asks for huge
    pages for it. glibc serves tensors of up to 32 MiB from its heap, where the autograd graph's small
    allocations, kept until the backward pass, land between a gradient step's freed activations, so
    the heap grows by each layer's temporaries. With huge pages a LoRA step of SmolLM2 on 3,072
    recomputed tokens peaked 2.4 GiB above its start instead of 4.5, in 1.04x the time
    (docs/performance.md, "The heap of a gradient step"; ``MALLOC_MMAP_THRESHOLD_=4194304
    MALLOC_TRIM_THRESHOLD_=1073741824`` take it to 0.9 GiB, in 1.4x the time)."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


MADV_NOHUGEPAGE = 15  # madvise's advice (Linux)
PAGE = 4096


def small_pages(tensor: torch.Tensor) -> None:
    """Ask Linux to back ``tensor``'s untouched CPU memory with 4 KB pages, not the huge pages of
    :func:`huge_pages`: for storage written sparsely, such as the KV pool, where each key/value head of
    each layer has a region of its own and one 2 MB page per region would be resident from its first
    block on (360 MB for SmolLM2's 180 regions). Nothing elsewhere."""
    if tensor.device.type != "cpu" or sys.platform != "linux" or not tensor.numel():
        return
    start = tensor.data_ptr() // PAGE * PAGE
    end = tensor.data_ptr() + tensor.numel() * tensor.element_size()
    ctypes.CDLL(None).madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_NOHUGEPAGE)


def trim_heap() -> None:
    """Give the pages of freed memory that glibc's allocator keeps back to the system
    (``malloc_trim``; nothing elsewhere): what its heap kept of the allocations under 32 MiB it
    serves (:func:`huge_pages`). The job worker calls it after each job, the engine once idle."""
    if sys.platform == "linux" and platform.libc_ver()[0] == "glibc":
        ctypes.CDLL(None).malloc_trim(0)


def brief_spin_waits() -> None:
    """Call before torch is imported (``toolkit serve`` does): unless the user chose
    (``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``), an idle OpenMP thread spins at most 100 times before it
    sleeps, libgomp's own choice when a process has more OpenMP threads than CPUs. Its default is
    300,000 spins whenever the threads fit the CPUs, as if the cores were the process's alone; on
    shared cores a team of 2 then spins at every op, waiting for a thread the OS has descheduled.
    The trainer's and the engine's teams run in threads of their own, so that default held while
    either ran alone: an SFT job of 5 batches of 64 on 2 threads took 14 to 34 s instead of 2 to 3 s
    (machine load 6 to 7; docs/performance.md, "Torch threads when processes share the cores")."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
