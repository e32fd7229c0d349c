"""What torch 2.x users call, on the snccl backend: tensor collectives, batched p2p, the
coalescing manager, subgroups, device meshes and DTensor, functional collectives (eager and
under torch.compile), monitored_barrier, FSDP2 against Gloo, mixed-device backends and
torchrun. Each multi-process run has a hard deadline. Skipped on torch < 2.6 (the 1.13
build runs test_torch_backend.py only)."""
import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest
import torch

from launch import HERE, PYTHON, free_port, run_ranks

_major, _minor = (int(v) for v in torch.__version__.split(".")[:2])
pytestmark = pytest.mark.skipif((_major, _minor) < (2, 6),
                                reason=f"torch {torch.__version__}: the 2.x API is tested on 2.6+")

CHECKS = ["backend_name", "all_gather_into_tensor", "reduce_scatter_tensor", "batch_isend_irecv",
          "coalescing_manager", "split_group", "new_subgroups", "device_mesh_dtensor", "functional_collectives",
          "functional_collectives_compiled", "monitored_barrier"]


def _check_all(world, init, env=None):
    codes, results, logs = run_ranks("torch2_worker.py", world, timeout=240, args=(init,), env=env)
    failures = []
    for r in range(world):
        if codes[r] != 0 or results[r] is None:
            failures.append(f"rank {r} exit {codes[r]}:\n{logs[r][-4000:]}")
            continue
        failures += [f"rank {r} {c}: {results[r].get(c, 'missing')}" for c in CHECKS
                     if results[r].get(c) != "ok"]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("world,device_id", [(3, None), (4, "cpu:0")], ids=["np3", "np4_bound"])
def test_torch2_api(world, device_id):
    # np4_bound: init_process_group(device_id=cpu), so new_group and new_subgroups split the
    # default group's communicator
    _check_all(world, "snccl", {"DEVICE_ID": device_id} if device_id else None)


def test_mixed_device_backends():
    # "cpu:snccl,cuda:nccl" is what GPU users write; torch creates NCCL's backend eagerly and
    # that needs a GPU, so on CPU-only machines the CUDA side is Gloo: the CPU side is the same.
    _check_all(2, "cpu:snccl,cuda:gloo")


def test_fsdp2_identical_to_gloo():
    codes, results, logs = run_ranks("fsdp_worker.py", 2, timeout=120)
    for r in range(2):
        assert codes[r] == 0 and results[r], f"rank {r}:\n{logs[r][-4000:]}"
        sn_losses, sn_sum, sn_params = results[r]["snccl"]
        gl_losses, gl_sum, gl_params = results[r]["gloo"]
        assert len(sn_losses) == 20
        assert sn_losses == gl_losses, f"rank {r}: {sn_losses} vs {gl_losses}"
        assert sn_params == gl_params, f"rank {r}: parameters differ from Gloo's"
    assert results[0]["snccl"][1] == results[1]["snccl"][1]  # every rank has the same model


def test_monitored_barrier_names_missing_ranks():
    codes, results, logs = run_ranks("monitored_worker.py", 4, timeout=90, env={"ABSENT": "1,3"})
    for r in range(4):
        assert codes[r] == 0 and results[r], f"rank {r}:\n{logs[r][-4000:]}"
    err = results[0]["error"]
    assert err and "Ranks 1, 3 failed to pass monitoredBarrier in 2000 ms" in err, err
    assert 1.5 < results[0]["seconds"] < 15, results[0]
    assert results[2]["error"] and "rank 0 did not release" in results[2]["error"], results[2]
    assert results[1]["error"] is None and results[3]["error"] is None


def test_torchrun():
    out = tempfile.mkdtemp(prefix="snccl-torchrun-")
    try:
        cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "3",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               os.path.join(HERE, "torchrun_worker.py"), out]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try:
            log, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # torchrun and the ranks it started
            log, _ = p.communicate()
            raise AssertionError(f"torchrun did not finish in 120 s (hang):\n{log[-3000:]}")
        assert p.returncode == 0, log[-6000:]
        res = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(3)]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    assert all(x["ok"] and x["world"] == 3 and x["backend"] == "snccl" for x in res), res
    assert sorted(x["local_rank"] for x in res) == [0, 1, 2]
    if os.environ.get("SNCCL_TORCH_EXPECT_INSTALLED") == "1":
        # scripts/run-tests.sh, on the installed wheel: the package and the libsnccl it carries
        pkg = res[0]["package"]
        assert "site-packages" in pkg, res[0]
        assert os.path.realpath(res[0]["library"]) == os.path.join(pkg, "lib", "libsnccl.so.0"), res[0]
