"""One agent cannot take the whole board: a claim beyond ``max_claims_per_agent`` (default 2) is
refused with 429 until the agent finishes or releases one. Before, one agent claimed every task."""

from __future__ import annotations

from boardkit import BoardGateway, post_task


def test_one_agent_cannot_claim_the_whole_board(board_gw: BoardGateway) -> None:
    ids = [f"greedy-{i}" for i in range(6)]
    for task_id in ids:
        post_task(board_gw, task_id)
    with board_gw.client(board_gw.tokens["a5"]) as greedy, board_gw.client(board_gw.tokens["a6"]) as other:
        codes = [greedy.post(f"/api/tasks/{t}/claim").status_code for t in ids]
        assert codes == [200, 200, 429, 429, 429, 429], codes
        refused = greedy.post(f"/api/tasks/{ids[2]}/claim")
        assert "most one agent may hold" in refused.json()["detail"], refused.text
        # the rest stay open for everyone else
        assert other.post(f"/api/tasks/{ids[2]}/claim").status_code == 200
        # renewing a claim held is not a new claim
        assert greedy.post(f"/api/tasks/{ids[0]}/claim").status_code == 200
        # letting one go frees a slot
        assert greedy.post(f"/api/tasks/{ids[0]}/release").status_code == 200
        assert greedy.post(f"/api/tasks/{ids[3]}/claim").status_code == 200
        for task_id in (ids[1], ids[3]):
            greedy.post(f"/api/tasks/{task_id}/release")
        other.post(f"/api/tasks/{ids[2]}/release")
    # an operator is not an agent taking work from others: no limit
    with board_gw.client(board_gw.operator_token) as op:
        assert [op.post(f"/api/tasks/{t}/claim").status_code for t in ids[3:]] == [200, 200, 200]
        for task_id in ids[3:]:
            op.post(f"/api/tasks/{task_id}/release")
