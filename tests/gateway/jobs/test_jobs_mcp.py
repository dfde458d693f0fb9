"""The job tools with the official MCP client, as an agent would use them."""

from __future__ import annotations

import asyncio

import pytest

from kstest.jobkit import JobsGateway
from kstest.mcp_client import ToolFailed, call, mcp_session


async def test_job_tools(jobs_gw: JobsGateway, kernels, workers) -> None:
    sha = await asyncio.to_thread(kernels, {"kernels/add/k.py": "# standin: verdict fail\n"})
    async with mcp_session(jobs_gw.url, jobs_gw.tokens["alice"]) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {"job_submit", "job_status", "job_logs", "job_cancel"} <= set(tools)
        assert all(
            len(tools[n].description or "") <= 80
            for n in ("job_submit", "job_status", "job_logs", "job_cancel")
        )
        assert "submitter" not in tools["job_submit"].input_schema["properties"], "identity is the token's"

        job = await call(session, "job_submit", task="add", kernel="kernels/add/k.py", ref=sha)
        assert job["state"] == "queued" and job["sha"] == sha
        waiting = await call(
            session, "job_submit", task="add", kernel="kernels/add/k.py", ref=sha, pool="cpu2"
        )
        with pytest.raises(ToolFailed, match="allowed_device_counts"):
            await call(
                session,
                "job_submit",
                task="add",
                kernel="kernels/add/k.py",
                ref=sha,
                pool="npu-910c",
                devices=4,
            )
        with pytest.raises(ToolFailed, match="unknown pool"):
            await call(session, "job_submit", task="add", kernel="kernels/add/k.py", ref=sha, pool="nope")

        await asyncio.to_thread(workers, "cpu")
        for _ in range(600):
            status = await call(session, "job_status", id=job["id"])
            if status["state"] not in ("queued", "running"):
                break
            await asyncio.sleep(0.1)
        assert status["state"] == "failed" and status["verdict"] == "fail"
        assert status["flags"] == ["mismatch"] and status["reasons"] == ["standin said fail"]
        logs = await call(session, "job_logs", id=job["id"], tail=2000)
        assert "standin: fail" in logs
        mine = await call(session, "job_status")
        assert {j["id"] for j in mine["jobs"]} >= {job["id"], waiting["id"]}

        cancelled = await call(session, "job_cancel", id=waiting["id"])
        assert cancelled["state"] == "cancelled"
        with pytest.raises(ToolFailed, match="no job"):
            await call(session, "job_status", id="j0000000000000")

    async with mcp_session(jobs_gw.url, jobs_gw.tokens["bob"]) as session:
        # alice's job is none of bob's business: it answers like a missing job, in every tool
        for tool, args in (("job_cancel", {}), ("job_status", {}), ("job_logs", {"tail": 100})):
            with pytest.raises(ToolFailed, match=f"no job {job['id']} \\(HTTP 404\\)"):
                await call(session, tool, id=job["id"], **args)
        assert await call(session, "job_status") == {"jobs": []}
